"""Dense ids become the same id lists whichever way they are built: the short path for a known
number of ids per row against tf.RaggedTensor.from_tensor."""

import numpy as np
import pytest
import tensorflow as tf

from sok_lite.keras.inputs import as_id_lists


@pytest.mark.parametrize("shape", [(5,), (5, 1), (5, 3), (0, 3), (0,), (4, 0)])
@pytest.mark.parametrize("dtype", [tf.int32, tf.int64])
def test_dense_ids_match_from_tensor(shape, dtype):
    ids = tf.constant(np.random.default_rng(0).integers(-3, 100, shape), dtype)
    got = as_id_lists(ids, None, "f")
    want = tf.RaggedTensor.from_tensor(ids if len(shape) == 2 else ids[:, tf.newaxis])
    assert got.dtype == dtype and got.row_splits.dtype == tf.int64
    np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
    np.testing.assert_array_equal(got.row_splits.numpy(), want.row_splits.numpy())


def test_dense_ids_of_unknown_width_in_a_graph():
    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64)])
    def splits(ids):
        return as_id_lists(ids, None, "f").row_splits

    np.testing.assert_array_equal(splits(tf.zeros([3, 2], tf.int64)).numpy(), [0, 2, 4, 6])
    np.testing.assert_array_equal(splits(tf.zeros([2, 0], tf.int64)).numpy(), [0, 0, 0])


def test_dense_ids_of_known_width_and_unknown_batch_in_a_graph():
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.int64)])
    def lists(ids):
        r = as_id_lists(ids, None, "f")
        return r.values, r.row_splits

    values, splits = lists(tf.reshape(tf.range(6, dtype=tf.int64), [2, 3]))
    np.testing.assert_array_equal(values.numpy(), np.arange(6))
    np.testing.assert_array_equal(splits.numpy(), [0, 3, 6])
    values, splits = lists(tf.zeros([0, 3], tf.int64))
    assert values.shape == (0,) and splits.numpy().tolist() == [0]
