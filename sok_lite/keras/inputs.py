"""Turns what a Keras embedding layer receives (ids, and per-id weights for weighted features)
into the id and weight lists that lookup_sparse takes."""

import tensorflow as tf


def as_id_lists(inputs: tf.Tensor, pad_value: int | None, label: str) -> tf.RaggedTensor:
    """The ids of one feature as a [batch, None] tf.RaggedTensor or tf.SparseTensor.

    Args:
      inputs: a tf.RaggedTensor or tf.SparseTensor [batch, None] of ids (passed through), or a
        dense integer tensor [batch, k] (or [batch], one id per sample).
      pad_value: for dense inputs, the id that marks an empty slot: entries equal to it are
        dropped. None: every entry is an id. Ragged and sparse inputs are never filtered.
      label: names the layer and feature in error messages.

    Returns:
      A tf.RaggedTensor or tf.SparseTensor [batch, None] with the same integer dtype.

    Raises:
      ValueError: for a dense input that is not of rank 1 or 2, or not integer.
    """
    if isinstance(inputs, (tf.RaggedTensor, tf.SparseTensor)):
        return inputs
    dense = _dense_ids(inputs, label)
    if pad_value is None:
        return _uniform_rows(dense)
    # A mask, not from_tensor(padding=...), which only strips trailing padding.
    return tf.ragged.boolean_mask(dense, _kept(dense, pad_value))


def one_id_a_sample(inputs: tf.Tensor, pad_value: int | None, label: str) -> tf.Tensor | None:
    """Dense ids of exactly one id a sample ([batch, 1] or [batch], no pad_value) as an integer
    [batch, 1] tensor, which lookup_sparse reads straight into its output on one rank; None for
    any other input (ragged, sparse, wider, or with a pad_value that may drop ids)."""
    if pad_value is not None or isinstance(inputs, (tf.RaggedTensor, tf.SparseTensor)):
        return None
    dense = _dense_ids(inputs, label)
    return dense if dense.shape[1] == 1 else None


def as_weighted_id_lists(
    inputs: tf.Tensor, weights: tf.Tensor, pad_value: int | None, label: str
) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
    """The ids of one weighted feature and their weights, in one [batch, None] layout.

    Args:
      inputs: the ids, as as_id_lists takes them.
      weights: one float weight per id, laid out like `inputs`: a tf.RaggedTensor with the same
        row lengths, a tf.SparseTensor with the same indices, or a dense tensor of the same
        shape (entries whose id is pad_value are dropped with their ids).
      pad_value: as as_id_lists.
      label: names the layer and feature in error messages.

    Returns:
      (ids, weights): two tf.RaggedTensor or two tf.SparseTensor [batch, None] with the same
      row splits or indices.

    Raises:
      ValueError: for weights of another kind (ragged, sparse, dense) than the ids, non-float
        weights, or dense weights whose static shape differs from the ids'.
      tf.errors.InvalidArgumentError: for weights whose row lengths, indices or shape differ
        from the ids' when the batch runs.
    """
    if not isinstance(weights, (tf.RaggedTensor, tf.SparseTensor)):
        weights = tf.convert_to_tensor(weights)
    if not isinstance(inputs, (tf.RaggedTensor, tf.SparseTensor)):
        inputs = _dense_ids(inputs, label)
        if weights.shape.rank == 1:
            weights = weights[:, tf.newaxis]
    check_weight_spec(inputs, weights, label)
    if isinstance(inputs, tf.RaggedTensor):
        same = _same_values(inputs.row_splits, weights.row_splits)
        return inputs, inputs.with_values(_checked(weights.values, same, "row lengths", label))
    if isinstance(inputs, tf.SparseTensor):
        same = _same_values(inputs.indices, weights.indices)
        values = _checked(weights.values, same, "indices", label)
        return inputs, tf.SparseTensor(inputs.indices, values, inputs.dense_shape)
    same = _same_values(tf.shape(inputs), tf.shape(weights))
    weights = _checked(weights, same, "shape", label)
    if pad_value is None:
        return tf.RaggedTensor.from_tensor(inputs), tf.RaggedTensor.from_tensor(weights)
    kept = _kept(inputs, pad_value)
    return tf.ragged.boolean_mask(inputs, kept), tf.ragged.boolean_mask(weights, kept)


def check_weight_spec(inputs, weights, label: str) -> None:
    """Checks what a model's inputs declare (keras.KerasTensor) before it runs: weights of the
    ids' kind (ragged, sparse or dense), a float dtype and, for dense ids, a compatible shape.

    Raises:
      ValueError: naming the feature, as as_weighted_id_lists does.
    """
    ids_kind, weights_kind = _kind(inputs), _kind(weights)
    if ids_kind != weights_kind:
        raise ValueError(
            f"{label}: {weights_kind} weights for {ids_kind} ids: the weights must be laid out "
            "like the ids"
        )
    dtype = tf.as_dtype(weights.dtype)
    if not dtype.is_floating:
        raise ValueError(f"{label}: weights must be floating point, got {dtype.name}")
    if ids_kind == "dense" and not tf.TensorShape(weights.shape).is_compatible_with(
        tf.TensorShape(inputs.shape)
    ):
        raise ValueError(
            f"{label}: weights of shape {weights.shape} for ids of shape {inputs.shape}: they "
            "must be laid out like the ids"
        )


def _kind(x) -> str:
    """ "ragged", "sparse" or "dense", for tensors and for keras.KerasTensor."""
    if isinstance(x, tf.RaggedTensor) or getattr(x, "ragged", False):
        return "ragged"
    if isinstance(x, tf.SparseTensor) or getattr(x, "sparse", False):
        return "sparse"
    return "dense"


def _dense_ids(inputs, label: str) -> tf.Tensor:
    """Dense ids as an integer [batch, k] tensor."""
    dense = tf.convert_to_tensor(inputs)
    if not dense.dtype.is_integer:
        raise ValueError(f"{label}: ids must be integers, got {dense.dtype.name}")
    if dense.shape.rank == 1:
        dense = dense[:, tf.newaxis]
    if dense.shape.rank != 2:
        raise ValueError(f"{label}: dense ids must be [batch, k] or [batch], got {dense.shape}")
    return dense


def _uniform_rows(dense: tf.Tensor) -> tf.RaggedTensor:
    """[batch, k] ids as a RaggedTensor of k ids per row. With k known, 4 ops rather than
    from_tensor's 16, which every training step runs once per feature."""
    k = dense.shape[1]
    if not k:  # unknown, or rows without ids
        return tf.RaggedTensor.from_tensor(dense)
    values = tf.reshape(dense, [-1])
    size = tf.size(values, out_type=tf.int64)
    splits = tf.range(tf.constant(0, tf.int64), size + 1, tf.constant(k, tf.int64))
    return tf.RaggedTensor.from_row_splits(values, splits, validate=False)


def _kept(dense: tf.Tensor, pad_value: int) -> tf.Tensor:
    """Where dense ids are ids, not pad_value."""
    return tf.not_equal(dense, tf.cast(pad_value, dense.dtype))


def _same_values(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """Whether two integer tensors hold the same values, sizes included."""
    a = tf.reshape(tf.cast(a, tf.int64), [-1])
    b = tf.reshape(tf.cast(b, tf.int64), [-1])
    return tf.cond(
        tf.equal(tf.size(a), tf.size(b)),
        lambda: tf.reduce_all(tf.equal(a, b)),
        lambda: tf.constant(False),
    )


def _checked(weights: tf.Tensor, same: tf.Tensor, what: str, label: str) -> tf.Tensor:
    """`weights`, once `same` holds: the lookup must not pair a weight with another id."""
    check = tf.debugging.assert_equal(
        same, True, message=f"{label}: the weights are not laid out like the ids (other {what})"
    )
    with tf.control_dependencies([check]):
        return tf.identity(weights)
