"""SOK 2.x calls that sok_lite takes unchanged: argument order and keywords
(docs/migration_from_sok.md)."""

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok


def test_lookup_sparse_takes_combiners_fourth_as_sok_does():
    table = sok.Variable(np.arange(12).reshape(4, 3), dtype=tf.float32)
    ids = tf.ragged.constant([[1, 3], [2]], dtype=tf.int64)
    weights = tf.ragged.constant([[1.0, 3.0], [2.0]])
    (mean,) = sok.lookup_sparse([table], [ids], None, ["mean"])
    np.testing.assert_allclose(mean.numpy(), [[6, 7, 8], [6, 7, 8]])
    (weighted,) = sok.lookup_sparse([table], [ids], [weights], ["sum"])
    np.testing.assert_allclose(weighted.numpy(), [[30, 34, 38], [12, 14, 16]])


def test_hotness_is_a_keyword():
    table = sok.Variable(np.zeros([4, 3]), dtype=tf.float32)
    ids = tf.ragged.constant([[1, 3, 2]], dtype=tf.int64)
    with pytest.raises(TypeError):
        sok.lookup_sparse([table], [ids], None, ["sum"], [2])
    with pytest.raises(tf.errors.InvalidArgumentError, match="hotness"):
        sok.lookup_sparse([table], [ids], None, ["sum"], hotness=[2])


def test_low_frequency_filter_is_refused_with_the_sok_lite_way():
    table = sok.DynamicVariable(3)
    ids = tf.ragged.constant([[1]], dtype=tf.int64)
    with pytest.raises(ValueError, match="min_count"):
        sok.lookup_sparse([table], [ids], use_low_frequency_filter=True)
    (out,) = sok.lookup_sparse([table], [ids], use_low_frequency_filter=False)
    assert out.shape == (1, 3)
