"""OptimizerScope with tf_keras (legacy Keras 2) optimizers: SGD, Adagrad exact; Adam lazy."""

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from tests.common import random_table
from tests.ops.optimizer.lazy_reference import LazyOptimizer
from tests.ops.optimizer.test_optimizers import DIM, ROWS, STEPS, sparse_steps

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")

tf_keras = pytest.importorskip("tf_keras")


def run(opt, var, steps, scoped):
    for rows, g in steps:
        grad = tf.IndexedSlices(tf.constant(g), tf.constant(rows, tf.int64), [ROWS, DIM])
        if scoped:
            with sok.OptimizerScope([var]):
                opt.apply_gradients([(grad, var)])
        else:
            opt.apply_gradients([(grad, var)])


@pytest.mark.parametrize(
    "make", [lambda: tf_keras.optimizers.SGD(0.1), lambda: tf_keras.optimizers.Adagrad(0.1)]
)
def test_sgd_and_adagrad_equal_tf_keras(make):
    init = random_table(21, ROWS, DIM)
    ours, ref = sok.Variable(init), tf.Variable(init)
    opt = make()
    run(opt, ours, sparse_steps(22), scoped=True)
    run(make(), ref, sparse_steps(22), scoped=False)
    np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-6, err_msg=str(opt.get_config()))
    assert int(opt.iterations) == STEPS


def test_adam_equals_lazy_reference():
    init = random_table(23, ROWS, DIM)
    ours = sok.Variable(init)
    opt = tf_keras.optimizers.Adam(0.01)
    run(opt, ours, sparse_steps(24), scoped=True)
    config = dict(opt.get_config(), amsgrad=False)
    ref, w = LazyOptimizer("adam", config, init.shape), init.copy()
    for rows, g in sparse_steps(24):
        ref.step(w, rows, g, 0.01)
    np.testing.assert_allclose(ours.numpy(), w, rtol=2e-5, atol=1e-6)
    assert set(sok.opt_slots(opt, ours)) == {"m", "v"}
