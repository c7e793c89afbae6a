"""sok_lite: sharded, sparse and dynamic embedding tables for TensorFlow/Keras."""

# _loader first: it refuses a Keras older than sok_lite's floor when imported (docs/install.md,
# "Version checks"). checkpoint, optimizer, sok_v1 and storage: module paths kept from the flat
# layout.
from sok_lite import (  # noqa: F401
    _loader,
    checkpoint,
    keras,
    optimizer,
    optimizers,
    sok_v1,
    storage,
)
from sok_lite._version import __version__
from sok_lite.comm import init, num_ranks, rank
from sok_lite.compat.sok2 import *  # noqa: F403 -- SOK 2.x's other names: its __all__
from sok_lite.compat.sok2 import __all__ as _sok2_names
from sok_lite.compat.sok2_dynamic import DynamicVariable
from sok_lite.compat.sok_v1 import All2AllDenseEmbedding, DistributedEmbedding, Init
from sok_lite.io.checkpoint import CheckpointError, dump, load
from sok_lite.io.delta import DeltaWriter
from sok_lite.io.serving import export_saved_model
from sok_lite.lookup.sparse import lookup_sparse
from sok_lite.memory import MemoryPlan, MemoryReport, TableSpec, memory_report, plan_memory
from sok_lite.memory.prefetch import prefetch
from sok_lite.optim.optimizer import (
    OptimizerScope,
    OptimizerWrapper,
    filter_variables,
    split_embedding_variable_from_others,
)
from sok_lite.optim.slots import opt_slots
from sok_lite.tables.variable import Variable

__all__ = [
    "init",
    "rank",
    "num_ranks",
    "Variable",
    "DynamicVariable",
    "lookup_sparse",
    "prefetch",
    "OptimizerScope",
    "OptimizerWrapper",
    "filter_variables",
    "split_embedding_variable_from_others",
    "opt_slots",
    "dump",
    "load",
    "CheckpointError",
    "export_saved_model",
    "DeltaWriter",
    "memory_report",
    "plan_memory",
    "MemoryReport",
    "MemoryPlan",
    "TableSpec",
    "optimizers",
    "keras",
    "storage",
    "Init",
    "All2AllDenseEmbedding",
    "DistributedEmbedding",
    *_sok2_names,  # tf_version, raw_ops, communication, ..., SGD
    "__version__",
]
