"""sok_lite.sok_v1, kept as a module path: the package is sok_lite.compat.sok_v1."""

import sys

from sok_lite.compat import sok_v1

sys.modules[__name__] = sok_v1
