"""Keras 3 layers and optimizer for sok_lite tables (`import sok_lite as sok; sok.keras...`)."""

from sok_lite.keras.delta_callback import DeltaCallback
from sok_lite.keras.features import FeatureSpec
from sok_lite.keras.layers import Embedding, EmbeddingCollection
from sok_lite.keras.memory_callback import MemoryReportCallback
from sok_lite.keras.prefetch import prefetch_rows
from sok_lite.optim.wrapper import OptimizerWrapper

__all__ = [
    "DeltaCallback",
    "Embedding",
    "EmbeddingCollection",
    "FeatureSpec",
    "MemoryReportCallback",
    "OptimizerWrapper",
    "prefetch_rows",
]
