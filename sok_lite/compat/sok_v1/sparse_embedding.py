"""sok.DistributedEmbedding: SOK's sparse embedding, ids of each (sample, slot) combined."""

import keras
import tensorflow as tf

from sok_lite.compat.sok_v1._base import SokTableLayer, _positive
from sok_lite.keras.features import InitializerLike
from sok_lite.keras.layers import Ids

_COMBINERS = ("sum", "mean")


@keras.saving.register_keras_serializable(package="sok_lite")
class DistributedEmbedding(SokTableLayer):
    """Combines the ids of each slot of each sample into one vector (SOK's first API).

    Rows of the input are (sample, slot) pairs in sample-major order: row b * slot_num + s holds
    the ids of slot s of sample b. The table has max_vocabulary_size_per_gpu * num_ranks rows;
    key k lives on rank k % num_ranks. Each rank feeds its own share of the global batch; the
    table's gradient is a tf.IndexedSlices over this rank's rows, to be applied with
    `sok.OptimizerScope` (never all-reduced).

    Args:
      combiner: "sum" or "mean" (any case, as SOK's "Sum" / "Mean").
      max_vocabulary_size_per_gpu: rows of the table per rank.
      embedding_vec_size: columns of the table, the width of each vector.
      slot_num: feature fields per sample.
      max_nnz: the most ids one slot of one sample may have (a longer one is an error).
      max_feature_num: accepted for SOK's signature (a memory hint there; unused here).
      use_hashtable: accepted for SOK's signature. Ids always index the table, so they must lie
        in [0, max_vocabulary_size_per_gpu * num_ranks); sok.DynamicVariable hashes raw keys.
      key_dtype: accepted for SOK's signature; int32 and int64 ids both work.
      embedding_initializer: a Keras initializer (default "random_uniform", [-0.05, 0.05]).
      **kwargs: keras.layers.Layer arguments (name, trainable, dtype).

    Call args:
      inputs: a tf.SparseTensor (or tf.RaggedTensor) [batch * slot_num, max_nnz] of int32/int64
        ids; a row without ids gives a vector of zeros.
      training: accepted for SOK's signature; the lookup is the same either way.

    Returns:
      [batch, slot_num, embedding_vec_size] in the layer's compute dtype.

    Raises:
      ValueError: for an unknown combiner, a non-positive size, or an input that is not a 2-D
        SparseTensor / RaggedTensor of integers.
      tf.errors.InvalidArgumentError: for an id outside the table, a slot with more than max_nnz
        ids, or a row count that is not a multiple of slot_num.

    >>> import tensorflow as tf, sok_lite as sok
    >>> layer = sok.DistributedEmbedding("mean", 100, 4, slot_num=2, max_nnz=3)
    >>> ids = tf.ragged.constant([[1, 2], [3], [4, 5, 6], []], dtype=tf.int64).to_sparse()
    >>> layer(ids).shape
    TensorShape([2, 2, 4])
    """

    _LAYER_ARGS = ("combiner", "slot_num", "max_nnz", "max_feature_num")

    def __init__(
        self,
        combiner: str,
        max_vocabulary_size_per_gpu: int,
        embedding_vec_size: int,
        slot_num: int,
        max_nnz: int,
        max_feature_num: int = 1,
        use_hashtable: bool = True,
        key_dtype: tf.DType | str | None = None,
        embedding_initializer: InitializerLike | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(
            max_vocabulary_size_per_gpu,
            embedding_vec_size,
            use_hashtable=use_hashtable,
            key_dtype=key_dtype,
            embedding_initializer=embedding_initializer,
            **kwargs,
        )
        if not isinstance(combiner, str) or combiner.lower() not in _COMBINERS:
            raise ValueError(f"combiner must be 'sum' or 'mean', got {combiner!r}")
        self.combiner = combiner.lower()
        self.slot_num = _positive("slot_num", slot_num)
        self.max_nnz = _positive("max_nnz", max_nnz)
        self.max_feature_num = max_feature_num

    def build(self, input_shape: object = None) -> None:
        self._build_table(self._make_feature(self.combiner, hotness=self.max_nnz))

    def call(self, inputs: Ids, training: bool | None = True) -> tf.Tensor:
        if not isinstance(inputs, (tf.SparseTensor, tf.RaggedTensor)):
            raise ValueError(
                f"layer {self.name!r}: inputs must be a tf.SparseTensor [batch * slot_num, "
                f"max_nnz], got {type(inputs).__name__}"
            )
        rows = inputs.dense_shape[0] if isinstance(inputs, tf.SparseTensor) else inputs.nrows()
        check = tf.debugging.assert_equal(
            tf.math.floormod(rows, self.slot_num),
            tf.constant(0, rows.dtype),
            message=f"layer {self.name!r}: input rows must be batch * slot_num ({self.slot_num})",
        )
        with tf.control_dependencies([check]):
            vectors = self._lookup([self.var], [self.feature], [inputs])[0]
        return tf.reshape(vectors, [-1, self.slot_num, self.embedding_vec_size])

    def compute_output_spec(
        self, inputs: keras.KerasTensor, training: bool | None = True
    ) -> keras.KerasTensor:
        rows = inputs.shape[0]
        batch = None if rows is None else rows // self.slot_num
        return keras.KerasTensor(
            (batch, self.slot_num, self.embedding_vec_size), dtype=self.compute_dtype
        )
