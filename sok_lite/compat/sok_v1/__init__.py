"""SOK's first API on sok_lite: `sok.Init`, `sok.All2AllDenseEmbedding`, `sok.DistributedEmbedding`.

The layers keep SOK's argument names and output shapes and are built on sok_lite.Variable and
sok_lite.lookup_sparse, so they train under sok.OptimizerScope like any other sok_lite table.
"""

from sok_lite.compat.sok_v1.dense_embedding import All2AllDenseEmbedding
from sok_lite.compat.sok_v1.init import Init, global_batch_size
from sok_lite.compat.sok_v1.sparse_embedding import DistributedEmbedding

__all__ = ["Init", "All2AllDenseEmbedding", "DistributedEmbedding", "global_batch_size"]
