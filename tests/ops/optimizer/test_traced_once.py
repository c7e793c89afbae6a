"""A custom loop's tf.function step that applies an optimizer to a table and a dense variable
traces once, with every optimizer family and both routes (OptimizerScope, OptimizerWrapper).

The optimizer's variables (Keras 3's build, tf_keras' build under its own init_scope, a legacy
optimizer's hyper-parameters and step counter read by the row-wise step) are made eagerly, not
by the trace, which tf.function would otherwise run a second time. The traced run must equal the
same steps taken eagerly (float64, bit for bit up to the last ulp)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from tests.common import random_table

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")

tf_keras = pytest.importorskip("tf_keras")

ROWS, DIM, BATCH, STEPS = 10, 3, 4, 4

OPTIMIZERS = {
    "keras_adam": lambda: keras.optimizers.Adam(0.05),
    "keras_sgd_momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "tf_keras_adam": lambda: tf_keras.optimizers.Adam(0.05),
    "legacy_adam": lambda: tf_keras.optimizers.legacy.Adam(0.05, decay=0.01),
    "legacy_adagrad": lambda: tf_keras.optimizers.legacy.Adagrad(0.1),
}


def train(make_optimizer, route, traced):
    """Trains a table and a dense weight; returns (their values, how often the step traced)."""
    table = sok.Variable(random_table(1, ROWS, DIM, np.float64), dtype=tf.float64)
    weight = tf.Variable(np.linspace(-1.0, 1.0, DIM), dtype=tf.float64)
    optimizer = make_optimizer()
    if route == "wrapper":
        optimizer = sok.OptimizerWrapper(optimizer)
    traces = []

    def step(rows, target):
        traces.append(1)
        with tf.GradientTape() as tape:
            out = tf.gather(table, rows) * weight
            loss = tf.reduce_sum(tf.square(tf.reduce_sum(out, axis=1) - target))
        pairs = list(zip(tape.gradient(loss, [table, weight]), [table, weight]))
        if route == "scope":
            with sok.OptimizerScope([table]):
                optimizer.apply_gradients(pairs)
        else:
            optimizer.apply_gradients(pairs)

    spec = [tf.TensorSpec([BATCH], tf.int64), tf.TensorSpec([BATCH], tf.float64)]
    fn = tf.function(step, input_signature=spec) if traced else step
    rng = np.random.default_rng(2)
    for _ in range(STEPS):
        rows = rng.choice(ROWS, BATCH, replace=False)
        fn(tf.constant(rows, tf.int64), tf.constant(rng.standard_normal(BATCH)))
    return [table.numpy(), weight.numpy()], len(traces)


@pytest.mark.parametrize("route", ["scope", "wrapper"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_custom_loop_traces_once_and_equals_eager_steps(name, route):
    got, traces = train(OPTIMIZERS[name], route, traced=True)
    want, _ = train(OPTIMIZERS[name], route, traced=False)
    assert traces == 1, f"{name} through the {route}: traced {traces} times"
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-15, err_msg=name)
    assert not np.array_equal(got[0], random_table(1, ROWS, DIM, np.float64))  # it trained
