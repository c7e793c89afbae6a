"""Empty samples, empty batches, graph mode and the static shapes of lookup_sparse."""

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_sample_without_ids_gives_zero_row(combiner):
    v = sok.Variable(np.ones([4, 3]), dtype=tf.float32)
    ids = tf.ragged.constant([[], [1, 2], []], dtype=tf.int64, ragged_rank=1)
    out = sok.lookup_sparse(v, ids, combiners=combiner).numpy()
    np.testing.assert_array_equal(out[0], 0)
    np.testing.assert_array_equal(out[2], 0)
    assert np.all(out[1] > 0)


def test_sparse_input_with_trailing_empty_samples_keeps_batch():
    v = sok.Variable(np.ones([4, 2]), dtype=tf.float32)
    sp = tf.SparseTensor(indices=[[0, 0]], values=tf.constant([3], tf.int64), dense_shape=[3, 5])
    out = sok.lookup_sparse(v, sp)
    np.testing.assert_array_equal(out.numpy(), [[1, 1], [0, 0], [0, 0]])


def test_zero_weights_give_zero_row_for_mean_and_sqrtn():
    v = sok.Variable(np.ones([4, 2]), dtype=tf.float32)
    ids = tf.ragged.constant([[1, 2]], dtype=tf.int64)
    w = tf.ragged.constant([[0.0, 0.0]], dtype=tf.float32)
    for combiner in ("mean", "sqrtn"):
        out = sok.lookup_sparse(v, ids, w, combiners=combiner)
        np.testing.assert_array_equal(out.numpy(), [[0, 0]])


@pytest.mark.parametrize("use_function", [False, True])
def test_empty_batch(use_function):
    v = sok.Variable(np.ones([4, 3]), dtype=tf.float32)
    ids = tf.RaggedTensor.from_row_splits(tf.zeros([0], tf.int64), tf.zeros([1], tf.int64))

    def step():
        with tf.GradientTape() as tape:
            out = sok.lookup_sparse([v], [ids])[0]
            loss = tf.reduce_sum(out)
        return out, tape.gradient(loss, v)

    out, grad = tf.function(step)() if use_function else step()
    assert out.shape == (0, 3)
    assert grad.values.shape == (0, 3)


def test_static_shapes_inside_function():
    v = sok.Variable(np.ones([10, 4]), dtype=tf.float32)

    @tf.function(input_signature=[tf.RaggedTensorSpec([8, None], tf.int64, ragged_rank=1)])
    def f(ids):
        out = sok.lookup_sparse(v, ids)
        assert out.shape.as_list() == [8, 4], out.shape
        return out

    ids = tf.RaggedTensor.from_row_lengths(tf.zeros([8], tf.int64), [1] * 8)
    assert f(ids).shape == (8, 4)


def test_variable_updates_are_seen_by_the_next_lookup():
    v = sok.Variable(np.zeros([3, 2]), dtype=tf.float32)
    ids = tf.ragged.constant([[2]], dtype=tf.int64)
    v.scatter_update(tf.IndexedSlices(tf.constant([[5.0, 6.0]]), tf.constant([2])))
    np.testing.assert_array_equal(sok.lookup_sparse(v, ids).numpy(), [[5, 6]])
    v.assign(tf.ones([3, 2]))
    np.testing.assert_array_equal(sok.lookup_sparse(v, ids).numpy(), [[1, 1]])


def test_same_table_twice_in_one_call_sums_gradients():
    v = sok.Variable(np.ones([5, 2]), dtype=tf.float32)
    a = tf.ragged.constant([[1, 2]], dtype=tf.int64)
    b = tf.ragged.constant([[2, 3]], dtype=tf.int64)
    with tf.GradientTape() as tape:
        oa, ob = sok.lookup_sparse([v, v], [a, b])
        loss = tf.reduce_sum(oa) + tf.reduce_sum(ob)
    dense = tf.convert_to_tensor(tape.gradient(loss, v)).numpy()
    np.testing.assert_array_equal(dense[:, 0], [0, 1, 2, 1, 0])


def test_gradient_of_a_tf_function_taken_by_an_outer_tape():
    """The tape sits outside the tf.function: TF builds the function's backward function, whose
    outputs must be tensors of its own graph (the gradients' indices were forward tensors)."""
    tables = [sok.Variable(np.ones([6, 2]), dtype=tf.float32), sok.DynamicVariable(2)]
    step = tf.function(lambda ids: sok.lookup_sparse(tables, [ids, ids]))
    ids = tf.ragged.constant([[1, 4], [4]], dtype=tf.int64)
    with tf.GradientTape() as tape:
        loss = tf.add_n([tf.reduce_sum(out) for out in step(ids)])
    for grad in tape.gradient(loss, tables):
        assert isinstance(grad, tf.IndexedSlices)
        assert grad.indices.numpy().tolist() == [1, 4]
        np.testing.assert_array_equal(grad.values.numpy(), [[1, 1], [2, 2]])
