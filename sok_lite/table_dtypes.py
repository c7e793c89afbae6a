"""The dtypes a sok_lite.Variable stores its rows in, and the dtype those rows are read as.

A 16-bit table (bfloat16, float16) halves the memory of its rows; lookups read them as float32
(combine, gradients and optimizer math run in float32, optimizer slots are float32) and an
optimizer step rounds the updated rows back (kernels/core/half_rows.h).
"""

import zlib

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


def rounding_seed(name: str | None, shape) -> int:
    """The seed of a 16-bit table's stochastic rounding: from its name and global shape, so that
    every rank (and every replica's shard) of the table draws the same bits."""
    text = f"{name or 'Variable'}:{list(tf.TensorShape(shape).as_list())}"
    return zlib.crc32(text.encode())
