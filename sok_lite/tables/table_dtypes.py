"""The dtypes a sok_lite.Variable stores its rows in, and the dtype those rows are read as.

A 16-bit table (bfloat16, float16) halves the memory of its rows; lookups read them as float32
(combine, gradients and optimizer math run in float32, optimizer slots are float32 unless the
table asks for bfloat16 slots) and an optimizer step rounds the updated rows back
(kernels/core/half_rows.h).
"""

import zlib

import numpy as np
import tensorflow as tf

TABLE_DTYPES = (tf.float32, tf.float64, tf.bfloat16, tf.float16)
HALF_DTYPES = (tf.bfloat16, tf.float16)


def row_dtype(dtype) -> tf.DType:
    """The dtype of rows read from a table stored in `dtype`: lookup outputs, gradients,
    optimizer slots. float32 for a 16-bit table, the table's own dtype otherwise."""
    dtype = tf.as_dtype(dtype)
    return tf.float32 if dtype in HALF_DTYPES else dtype


def check_table_dtype(dtype, name: str | None) -> tf.DType:
    """`dtype` as a tf.DType if a table can store it, else a ValueError naming the table."""
    try:
        dtype = tf.as_dtype(dtype)
    except TypeError as e:
        raise ValueError(f"table '{name or 'Variable'}': {dtype!r} is not a dtype") from e
    if dtype not in TABLE_DTYPES:
        names = ", ".join(d.name for d in TABLE_DTYPES)
        raise ValueError(
            f"table '{name or 'Variable'}': dtype {dtype.name} is not supported ({names})"
        )
    return dtype


def check_value_range(value, dtype, name: str | None, what: str = "initial value", columns=None):
    """`value` (array-like or tensor; a callable is not checked), once checked to fit a table
    stored in `dtype`.

    A float16 table holds magnitudes up to 65,504: a finite value beyond it would be stored as
    inf, so it is refused (bfloat16 has float32's range, other dtypes are not checked). columns:
    only the first `columns` of the last axis hold table values (rows with optimizer slots).
    Eagerly a ValueError names the table and the first such value; in a graph the check runs
    with the value (tf.errors.InvalidArgumentError).
    """
    if tf.as_dtype(dtype) != tf.float16 or value is None or callable(value):
        return value
    tensor = value if tf.is_tensor(value) else np.asarray(value)
    kind = tf.as_dtype(tensor.dtype) if tf.is_tensor(tensor) else None
    if not (kind.is_floating or kind.is_integer) if kind else tensor.dtype.kind not in "fiu":
        return value
    if kind == tf.float16 or tensor.dtype == np.float16:
        return value  # in range by construction
    part = tensor[..., :columns] if columns is not None else tensor
    limit = float(np.finfo(np.float16).max)
    label = f"table '{name or 'Variable'}'"
    if not tf.is_tensor(part) or tf.executing_eagerly():
        flat = np.asarray(part, np.float64).ravel()
        beyond = np.flatnonzero(np.isfinite(flat) & (np.abs(flat) > limit))
        if beyond.size:
            raise ValueError(
                f"{label}: {what} {float(flat[beyond[0]])!r} is beyond float16's range (largest "
                f"magnitude {limit:g}) and would be stored as inf"
            )
        return value
    wide = tf.abs(tf.cast(part, tf.float64))
    largest = tf.reduce_max(tf.where(tf.math.is_finite(wide), wide, tf.zeros_like(wide)))
    check = tf.debugging.assert_less_equal(
        largest, tf.constant(limit, tf.float64), f"{label}: {what} beyond float16's range"
    )
    with tf.control_dependencies([check]):
        return tf.identity(value)


def check_slot_dtype(slot_dtype, table_dtype: tf.DType, name: str | None) -> tf.DType:
    """The dtype of the optimizer slots of a table stored in `table_dtype`.

    None: the row dtype (float32 beside a 16-bit table). bfloat16 slots are allowed beside a
    16-bit table: bfloat16 has float32's exponent range, so Adam's v = g^2, Adagrad's and Ftrl's
    accumulators neither overflow nor underflow, and stochastic rounding keeps their small
    per-step changes unbiased. float16 slots are refused (g^2 underflows below 6e-8), and so is
    any 16-bit slot dtype beside a float32 / float64 table (its rows would then be more precise
    than the state that steps them; use a bfloat16 table). ValueError names the table.
    """
    label = f"table '{name or 'Variable'}'"
    rows = row_dtype(table_dtype)
    if slot_dtype is None:
        return rows
    try:
        slot_dtype = tf.as_dtype(slot_dtype)
    except TypeError as e:
        raise ValueError(f"{label}: slot_dtype {slot_dtype!r} is not a dtype") from e
    if slot_dtype == rows:
        return rows
    if slot_dtype == tf.float16:
        raise ValueError(
            f"{label}: float16 optimizer slots are not supported: squared gradients (Adam's v, "
            "Adagrad's accumulator) underflow float16's range; use slot_dtype=tf.bfloat16"
        )
    if slot_dtype != tf.bfloat16:
        raise ValueError(
            f"{label}: slot_dtype {slot_dtype.name} is not supported (float32 or bfloat16)"
        )
    if table_dtype not in HALF_DTYPES:
        raise ValueError(
            f"{label}: bfloat16 slots need a 16-bit table (dtype bfloat16 or float16), "
            f"the table is {table_dtype.name}"
        )
    return slot_dtype


def rounding_seed(name: str | None, shape) -> int:
    """The seed of a 16-bit table's stochastic rounding: from its name and global shape, so that
    every rank (and every replica's shard) of the table draws the same bits."""
    text = f"{name or 'Variable'}:{list(tf.TensorShape(shape).as_list())}"
    return zlib.crc32(text.encode())
