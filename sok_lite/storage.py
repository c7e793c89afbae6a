"""sok_lite.storage, kept as a module path: the module is sok_lite.tables.storage."""

import sys

from sok_lite.tables import storage

sys.modules[__name__] = storage
