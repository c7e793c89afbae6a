"""sok_lite.optimizer, kept as a module path: the module is sok_lite.optim.optimizer."""

import sys

from sok_lite.optim import optimizer

sys.modules[__name__] = optimizer
