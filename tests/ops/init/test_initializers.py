"""Row initializers: right distributions, and values that depend only on (seed, row id)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.tables.initializers import RowInitializer, row_initializer

ROWS, DIM = 4000, 32  # 128k values: sample mean within ~4 sigma of 0 is |m| < 0.012 * stddev


@pytest.mark.parametrize("stddev", [0.05, 1.0])
def test_random_normal_moments(stddev):
    v = sok.Variable(shape=[ROWS, DIM], initializer=keras.initializers.RandomNormal(0.0, stddev, 3))
    x = v.numpy()
    assert abs(x.mean()) < 0.012 * stddev
    assert abs(x.std() / stddev - 1) < 0.01
    assert abs(np.corrcoef(x[:, 0], x[:, 1])[0, 1]) < 0.07  # columns independent


def test_truncated_normal_bounds_and_spread():
    x = sok.Variable(
        shape=[ROWS, DIM], initializer=keras.initializers.TruncatedNormal(1.0, 0.5)
    ).numpy()
    assert x.min() >= 1.0 - 2 * 0.5 and x.max() <= 1.0 + 2 * 0.5
    # A normal truncated at 2 sigma has standard deviation 0.8796 sigma.
    assert abs(x.std() / (0.8796 * 0.5) - 1) < 0.01


def test_random_uniform_bounds_and_mean():
    x = sok.Variable(
        shape=[ROWS, DIM], initializer=keras.initializers.RandomUniform(-2.0, 4.0)
    ).numpy()
    assert x.min() >= -2.0 and x.max() < 4.0
    assert abs(x.mean() - 1.0) < 0.03


@pytest.mark.parametrize(
    "initializer,value",
    [("zeros", 0.0), ("ones", 1.0), (keras.initializers.Constant(2.5), 2.5), (7, 7.0)],
)
def test_constants(initializer, value):
    np.testing.assert_array_equal(
        sok.Variable(shape=[3, 2], initializer=initializer).numpy(), value
    )


def test_a_row_depends_only_on_seed_and_id(device):
    init = RowInitializer("random_normal", 0.0, 1.0, seed=11)
    all_rows = init(tf.range(100, dtype=tf.int64), 8, tf.float32).numpy()
    some = init(tf.constant([97, 5, 5, 2**62], tf.int64), 8, tf.float32).numpy()
    np.testing.assert_array_equal(some[0], all_rows[97])
    np.testing.assert_array_equal(some[1], all_rows[5])
    np.testing.assert_array_equal(some[2], all_rows[5])
    assert not np.allclose(some[3], all_rows[5])
    other_seed = RowInitializer("random_normal", 0.0, 1.0, seed=12)(
        tf.range(100, dtype=tf.int64), 8, tf.float32
    )
    assert not np.allclose(other_seed.numpy(), all_rows)


def test_same_seed_same_table_and_default_seeds_differ():
    a = sok.Variable(shape=[10, 4], initializer=keras.initializers.RandomNormal(seed=5))
    b = sok.Variable(shape=[10, 4], initializer=keras.initializers.RandomNormal(seed=5))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    c, d = sok.Variable(shape=[10, 4]), sok.Variable(shape=[10, 4])
    assert not np.allclose(c.numpy(), d.numpy())
    assert abs(c.numpy().std() - 0.05) < 0.02  # Keras' default random_normal stddev


def test_other_callables_are_evaluated_globally():
    v = sok.Variable(
        shape=[4, 2], initializer=lambda shape, dtype: tf.reshape(tf.range(8.0), shape)
    )
    np.testing.assert_array_equal(v.numpy(), np.arange(8.0).reshape(4, 2))
    assert row_initializer(keras.initializers.Orthogonal()) is None
