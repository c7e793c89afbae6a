"""Turns what a Keras embedding layer receives into the id lists that lookup_sparse takes."""

import tensorflow as tf


def as_id_lists(inputs, pad_value: int | None, label: str):
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
    dense = tf.convert_to_tensor(inputs)
    if not dense.dtype.is_integer:
        raise ValueError(f"{label}: ids must be integers, got {dense.dtype.name}")
    if dense.shape.rank == 1:
        dense = dense[:, tf.newaxis]
    if dense.shape.rank != 2:
        raise ValueError(f"{label}: dense ids must be [batch, k] or [batch], got {dense.shape}")
    if pad_value is None:
        return tf.RaggedTensor.from_tensor(dense)
    # A mask, not from_tensor(padding=...), which only strips trailing padding.
    return tf.ragged.boolean_mask(dense, tf.not_equal(dense, tf.cast(pad_value, dense.dtype)))
