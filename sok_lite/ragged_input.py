"""Turns user id/weight inputs (tf.SparseTensor or tf.RaggedTensor, [batch, None]) into the
flat values + int64 row_splits that the kernels take."""

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
    else:
        raise ValueError(
            f"{label}: {what} must be a tf.SparseTensor or tf.RaggedTensor, got {type(x).__name__}"
        )


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
    values = tf.cast(x.values, dtype)
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
