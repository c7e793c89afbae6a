"""Turns user id/weight inputs (tf.SparseTensor or tf.RaggedTensor, [batch, None]) into the
flat values + int64 row_splits that the kernels take."""

import tensorflow as tf


def _as_ragged(x, what: str, table: int) -> tf.RaggedTensor:
    if isinstance(x, tf.RaggedTensor):
        if x.ragged_rank != 1 or x.shape.rank != 2:
            raise ValueError(
                f"table {table}: {what} must be a 2-D RaggedTensor [batch, None], "
                f"got shape {x.shape} with ragged_rank {x.ragged_rank}"
            )
        return x
    if isinstance(x, tf.SparseTensor):
        if x.shape.rank is not None and x.shape.rank != 2:
            raise ValueError(
                f"table {table}: {what} must be a 2-D SparseTensor, got rank {x.shape.rank}"
            )
        # validate=True raises InvalidArgumentError for indices out of row order (from_sparse
        # would silently mis-assign ids to samples).
        return tf.RaggedTensor.from_value_rowids(
            x.values, x.indices[:, 0], nrows=x.dense_shape[0], validate=True
        )
    raise ValueError(
        f"table {table}: {what} must be a tf.SparseTensor or tf.RaggedTensor, "
        f"got {type(x).__name__}"
    )


def ids_parts(x, table: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Returns (int64 ids [n], int64 row_splits [batch + 1]) of table `table`'s ids."""
    ragged = _as_ragged(x, "sp_ids", table)
    if ragged.dtype not in (tf.int32, tf.int64):
        raise ValueError(f"table {table}: ids must be int32 or int64, got {ragged.dtype.name}")
    return tf.cast(ragged.values, tf.int64), tf.cast(ragged.row_splits, tf.int64)


def weight_values(x, ids: tf.Tensor, dtype: tf.DType, table: int) -> tf.Tensor:
    """Returns the [n] weights of table `table`, checked to have one weight per id."""
    ragged = _as_ragged(x, "sp_weights", table)
    if not ragged.dtype.is_floating:
        raise ValueError(f"table {table}: weights must be floating point, got {ragged.dtype.name}")
    values = tf.cast(ragged.values, dtype)
    n_ids, n_weights = ids.shape[0], values.shape[0]
    if n_ids is not None and n_weights is not None:
        if n_ids != n_weights:
            raise ValueError(f"table {table}: {n_weights} weights for {n_ids} ids")
        return values
    check = tf.debugging.assert_equal(
        tf.size(values), tf.size(ids), message=f"table {table}: weights and ids differ in count"
    )
    with tf.control_dependencies([check]):
        return tf.identity(values)
