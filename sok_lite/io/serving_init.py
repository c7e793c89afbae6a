"""The row initializer (kernels/core/row_init.cc) in plain TensorFlow ops, for serving graphs
that must give a never-seen hash-table key the same row as training did, without sok_lite."""

import math

import numpy as np
import tensorflow as tf

from sok_lite.tables.initializers import RowInitializer
from sok_lite.tables.key_hash import splitmix64_tf as _mix

_TRUNCATED_DRAWS = 12  # redraws beyond 2 stddev; P(all 12 fail) ~ 1e-16


def _u64(x: int) -> tf.Tensor:
    return tf.constant(x, tf.uint64)


def _uniform(seed: int, keys: tf.Tensor, dim: int, draw: int) -> tf.Tensor:
    """[n, dim] float64 in (0, 1), as Uniform(seed, id, col, draw) in row_init.cc."""
    seeded = _mix(_u64(seed % 2**64))
    ids = tf.bitcast(keys, tf.uint64)[:, None]
    cols = tf.cast(tf.range(dim, dtype=tf.int64), tf.uint64)[None, :] * _u64(0x100000001B3)
    h = tf.bitwise.bitwise_xor(_mix(tf.bitwise.bitwise_xor(seeded, ids)), cols)
    h = _mix(tf.bitwise.bitwise_xor(h, _u64((draw << 40) % 2**64)))
    return (tf.cast(tf.bitwise.right_shift(h, _u64(11)), tf.float64) + 0.5) * (1.0 / 2.0**53)


def _normal(seed: int, keys: tf.Tensor, dim: int, draw: int) -> tf.Tensor:
    u1, u2 = _uniform(seed, keys, dim, 2 * draw), _uniform(seed, keys, dim, 2 * draw + 1)
    return tf.sqrt(-2.0 * tf.math.log(u1)) * tf.cos(2.0 * math.pi * u2)


def initial_rows(init: RowInitializer, keys: tf.Tensor, dim: int) -> tf.Tensor:
    """The float32 [n, dim] rows SokLiteInitRows gives int64 `keys`."""
    # The op takes a and b as float32 attributes; round the same way.
    a, b = float(np.float32(init.a)), float(np.float32(init.b))
    n = tf.shape(keys)[0]
    if init.kind == "constant":
        return tf.fill([n, dim], tf.cast(a, tf.float32))
    if init.kind == "random_uniform":
        return tf.cast(a + (b - a) * _uniform(init.seed, keys, dim, 0), tf.float32)
    z = _normal(init.seed, keys, dim, 0)
    if init.kind == "truncated_normal":
        for draw in range(1, _TRUNCATED_DRAWS):
            z = tf.where(tf.abs(z) > 2.0, _normal(init.seed, keys, dim, draw), z)
    return tf.cast(a + b * z, tf.float32)
