"""lookup_sparse on dense [batch, hotness] ids: the same results and gradients as the same ids
given as a RaggedTensor, for array and hash tables."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")


def tables():
    rng = np.random.default_rng(4)
    static = sok.Variable(rng.standard_normal([50, 3]), dtype=tf.float32, name="items")
    dynamic = sok.DynamicVariable(
        3, initializer=keras.initializers.RandomUniform(seed=1), name="users"
    )
    return [static, dynamic]


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_dense_ids_and_weights_equal_ragged_ones(combiner):
    rng = np.random.default_rng(0)
    ids = [rng.integers(0, 50, [64, 3]), rng.integers(-(2**62), 2**62, [64, 2])]
    weights = [rng.uniform(0.5, 2.0, x.shape).astype(np.float32) for x in ids]
    params = tables()

    upstream = [tf.constant(rng.standard_normal([64, 3]), tf.float32) for _ in ids]

    def step(x, w):
        with tf.GradientTape() as tape:
            out = sok.lookup_sparse(params, x, sp_weights=w, combiners=combiner)
            loss = sum(tf.reduce_sum(o * u) for o, u in zip(out, upstream))
        return out, tape.gradient(loss, params)

    dense_spec = [tf.TensorSpec([None, 3], tf.int64), tf.TensorSpec([None, 2], tf.int64)]
    weight_spec = [tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None, 2], tf.float32)]
    dense_step = tf.function(step, input_signature=[dense_spec, weight_spec])
    dense, dense_grads = dense_step(
        [tf.constant(a) for a in ids], [tf.constant(a) for a in weights]
    )
    ragged, ragged_grads = step(
        [tf.RaggedTensor.from_tensor(a) for a in ids],
        [tf.RaggedTensor.from_tensor(a) for a in weights],
    )
    for d, r in zip(dense, ragged):
        assert d.shape == (64, 3)
        np.testing.assert_allclose(d.numpy(), r.numpy(), rtol=1e-6)
    for d, r in zip(dense_grads, ragged_grads):
        np.testing.assert_array_equal(d.indices.numpy(), r.indices.numpy())
        np.testing.assert_allclose(d.values.numpy(), r.values.numpy(), rtol=1e-6)


def test_empty_dense_batches_and_samples():
    for table in tables():
        assert sok.lookup_sparse(table, tf.zeros([0, 2], tf.int64)).shape == (0, 3)
        out = sok.lookup_sparse(table, tf.zeros([4, 0], tf.int64)).numpy()
        np.testing.assert_array_equal(out, np.zeros([4, 3]))


def test_dense_ids_wider_than_hotness_are_rejected():
    for table in tables():
        name = table.name.split(":")[0]
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"{name}.*more than hotness 1"):
            sok.lookup_sparse(table, tf.constant([[1, 2]], tf.int64), hotness=1)


@pytest.mark.parametrize("shape", [[4], [2, 2, 1]])
def test_dense_ids_must_be_2d(shape):
    with pytest.raises(ValueError, match="dense sp_ids must be 2-D"):
        sok.lookup_sparse(tables()[0], tf.zeros(shape, tf.int64))
