"""Turns user id/weight inputs (tf.SparseTensor or tf.RaggedTensor [batch, None], or a dense
[batch, hotness] tf.Tensor) into the flat values + int64 row_splits that the kernels take."""

import tensorflow as tf

from sok_lite.ops import lookup_ops


def _check_2d(x, what: str, label: str) -> None:
    if isinstance(x, tf.RaggedTensor):
        if x.ragged_rank != 1 or x.shape.rank != 2:
            raise ValueError(
                f"{label}: {what} must be a 2-D RaggedTensor [batch, None], got shape {x.shape} "
                f"with ragged_rank {x.ragged_rank}"
            )
    elif isinstance(x, tf.SparseTensor):
        if x.shape.rank is not None and x.shape.rank != 2:
            raise ValueError(f"{label}: {what} must be a 2-D SparseTensor, got rank {x.shape.rank}")
    elif isinstance(x, tf.Tensor):
        if x.shape.rank != 2:
            raise ValueError(f"{label}: dense {what} must be 2-D [batch, hotness], got {x.shape}")
    else:
        raise ValueError(
            f"{label}: {what} must be a tf.SparseTensor, tf.RaggedTensor or 2-D tf.Tensor, got "
            f"{type(x).__name__}"
        )


def _flat_values(x) -> tf.Tensor:
    """The values of a sparse, ragged or dense [batch, hotness] input, in row-major order."""
    return tf.reshape(x, [-1]) if isinstance(x, tf.Tensor) else x.values


def ids_parts(x, label: str, plain_tf: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
    """Returns (int64 ids [n], int64 row_splits [batch + 1]) of one table's ids.

    label names the table in error messages, e.g. "table 0 ('users')". plain_tf: use only
    TensorFlow's own ops (serving graphs).
    """
    _check_2d(x, "sp_ids", label)
    if x.dtype not in (tf.int32, tf.int64):
        raise ValueError(f"{label}: ids must be int32 or int64, got {x.dtype.name}")
    if isinstance(x, tf.RaggedTensor):
        return tf.cast(x.values, tf.int64), tf.cast(x.row_splits, tf.int64)
    if isinstance(x, tf.Tensor):  # every sample has hotness ids
        batch, hotness = tf.unstack(tf.shape(x, out_type=tf.int64))
        return tf.cast(_flat_values(x), tf.int64), tf.range(batch + 1) * hotness
    if plain_tf:
        ragged = tf.RaggedTensor.from_value_rowids(x.values, x.indices[:, 0], x.dense_shape[0])
        return tf.cast(ragged.values, tf.int64), tf.cast(ragged.row_splits, tf.int64)
    # The kernel checks row-major order, which tf.RaggedTensor.from_sparse would silently assume.
    splits = lookup_ops.row_splits_from_row_ids(x.indices[:, 0], x.dense_shape[0], label)
    return tf.cast(x.values, tf.int64), splits


def weight_values(x, ids: tf.Tensor, dtype: tf.DType, label: str) -> tf.Tensor:
    """Returns the [n] weights of one table, checked to have one weight per id.

    Weights are taken to share the layout (indices or row splits) of the ids, as in
    tf.nn.embedding_lookup_sparse.
    """
    _check_2d(x, "sp_weights", label)
    if not x.dtype.is_floating:
        raise ValueError(f"{label}: weights must be floating point, got {x.dtype.name}")
    values = tf.cast(_flat_values(x), dtype)
    n_ids, n_weights = ids.shape[0], values.shape[0]
    if n_ids is not None and n_weights is not None:
        if n_ids != n_weights:
            raise ValueError(f"{label}: {n_weights} weights for {n_ids} ids")
        return values
    check = tf.debugging.assert_equal(
        tf.size(values), tf.size(ids), message=f"{label}: weights and ids differ in count"
    )
    with tf.control_dependencies([check]):
        return tf.identity(values)
