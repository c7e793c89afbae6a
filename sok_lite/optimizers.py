"""sok_lite.optimizers, kept as a module path: the module is sok_lite.optim.optimizers."""

import sys

from sok_lite.optim import optimizers

sys.modules[__name__] = optimizers
