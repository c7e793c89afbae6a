"""The example of the design document, with one rank."""

import numpy as np
import tensorflow as tf

import sok_lite as sok


def test_design_example():
    sok.init()
    v1 = sok.Variable(np.arange(17 * 3).reshape(17, 3), dtype=tf.float32)
    v2 = sok.Variable(np.arange(7 * 5).reshape(7, 5), dtype=tf.float32)
    ids1 = tf.ragged.constant([[1, 1], [3, 4, 5]], dtype=tf.int64)
    ids2 = tf.ragged.constant([[1], [2, 3]], dtype=tf.int64)
    with tf.GradientTape() as tape:
        o1, o2 = sok.lookup_sparse([v1, v2], [ids1, ids2], combiners=["sum", "sum"])
        loss = tf.reduce_sum(o1)
    np.testing.assert_array_equal(o1.numpy(), [[6, 8, 10], [36, 39, 42]])
    np.testing.assert_array_equal(o2.numpy(), [[5, 6, 7, 8, 9], [25, 27, 29, 31, 33]])
    grad = tape.gradient(loss, v1)
    assert isinstance(grad, tf.IndexedSlices)
    assert sorted(grad.indices.numpy().tolist()) == [1, 3, 4, 5]
    by_row = dict(zip(grad.indices.numpy().tolist(), grad.values.numpy().tolist()))
    assert by_row[1] == [2.0, 2.0, 2.0]
    assert by_row[3] == by_row[4] == by_row[5] == [1.0, 1.0, 1.0]
    assert v1.shape == (17, 3) and v1.global_shape == (17, 3)
