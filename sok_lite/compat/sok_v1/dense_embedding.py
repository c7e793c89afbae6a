"""sok.All2AllDenseEmbedding: SOK's dense embedding, one vector per id, no combining."""

import keras
import tensorflow as tf

from sok_lite.compat.sok_v1._base import SokTableLayer, _positive
from sok_lite.keras.features import InitializerLike
from sok_lite.keras.layers import Ids


@keras.saving.register_keras_serializable(package="sok_lite")
class All2AllDenseEmbedding(SokTableLayer):
    """Looks up every id of a dense [batch, slot_num, nnz_per_slot] tensor (SOK's first API).

    The table has max_vocabulary_size_per_gpu * num_ranks rows of embedding_vec_size; key k
    lives on rank k % num_ranks. Each rank feeds its own share of the global batch and gets that
    share's vectors; the table's gradient is a tf.IndexedSlices over this rank's rows, to be
    applied with `sok.OptimizerScope` (never all-reduced).

    Args:
      max_vocabulary_size_per_gpu: rows of the table per rank.
      embedding_vec_size: columns of the table, the width of each vector.
      slot_num: feature fields per sample.
      nnz_per_slot: ids per field (every field has exactly this many).
      dynamic_input: False: inputs hold batch * slot_num * nnz_per_slot ids, the output is
        [batch, slot_num, nnz_per_slot, embedding_vec_size]. True: inputs of any shape (e.g. the
        1-D output of tf.unique), the output is inputs.shape + [embedding_vec_size].
      use_hashtable: accepted for SOK's signature. Ids always index the table, so they must lie
        in [0, max_vocabulary_size_per_gpu * num_ranks); sok.DynamicVariable hashes raw keys.
      key_dtype: accepted for SOK's signature; int32 and int64 ids both work.
      embedding_initializer: a Keras initializer (default "random_uniform", [-0.05, 0.05]).
      **kwargs: keras.layers.Layer arguments (name, trainable, dtype).

    Call args:
      inputs: an int32/int64 tensor [batch, slot_num, nnz_per_slot] (row-major ids).
      training: accepted for SOK's signature; the lookup is the same either way.

    Returns:
      [batch, slot_num, nnz_per_slot, embedding_vec_size] (dynamic_input: inputs.shape +
      [embedding_vec_size]) in the layer's compute dtype.

    Raises:
      ValueError: for non-integer ids or a non-positive size.
      tf.errors.InvalidArgumentError: for an id outside the table.

    >>> import tensorflow as tf, sok_lite as sok
    >>> layer = sok.All2AllDenseEmbedding(100, 4, slot_num=3, nnz_per_slot=2)
    >>> layer(tf.zeros([5, 3, 2], tf.int64)).shape
    TensorShape([5, 3, 2, 4])
    """

    _LAYER_ARGS = ("slot_num", "nnz_per_slot", "dynamic_input")

    def __init__(
        self,
        max_vocabulary_size_per_gpu: int,
        embedding_vec_size: int,
        slot_num: int,
        nnz_per_slot: int,
        dynamic_input: bool = False,
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
        self.slot_num = _positive("slot_num", slot_num)
        self.nnz_per_slot = _positive("nnz_per_slot", nnz_per_slot)
        self.dynamic_input = bool(dynamic_input)

    def build(self, input_shape: object = None) -> None:
        self._build_table(self._make_feature("sum", hotness=1))

    def call(self, inputs: Ids, training: bool | None = True) -> tf.Tensor:
        ids = tf.convert_to_tensor(inputs)
        # One id per sample: a "sum" over one id is the id's own row.
        flat = tf.reshape(ids, [-1, 1])
        vectors = self._lookup([self.var], [self.feature], [flat])[0]
        if self.dynamic_input:
            shape = tf.concat([tf.shape(ids), [self.embedding_vec_size]], axis=0)
        else:
            shape = [-1, self.slot_num, self.nnz_per_slot, self.embedding_vec_size]
        return tf.reshape(vectors, shape)

    def compute_output_spec(
        self, inputs: keras.KerasTensor, training: bool | None = True
    ) -> keras.KerasTensor:
        if self.dynamic_input:
            shape = tuple(inputs.shape) + (self.embedding_vec_size,)
        else:
            shape = (inputs.shape[0], self.slot_num, self.nnz_per_slot, self.embedding_vec_size)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)
