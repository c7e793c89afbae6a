"""sok_lite.checkpoint, kept as a module path: the module is sok_lite.io.checkpoint."""

import sys

from sok_lite.io import checkpoint

sys.modules[__name__] = checkpoint
