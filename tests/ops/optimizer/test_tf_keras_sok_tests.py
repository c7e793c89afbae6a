"""tf_keras optimizers (tf.keras.optimizers when tf_keras is installed) on sok_lite tables.

Each optimizer runs on a sok_lite table (through OptimizerScope and OptimizerWrapper) and on a
plain tf.Variable, with the same IndexedSlices gradients on the same rows at every step: there
the row-wise kernels must equal tf_keras. Rows without a gradient stay as they were (lazy), where
several tf_keras optimizers would move them.
"""

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from tests.common import random_table

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")

tf_keras = pytest.importorskip("tf_keras")

ROWS, DIM, STEPS = 12, 3, 5
TOUCHED = np.array([0, 2, 3, 7, 11])  # the rows with a gradient, at every step
UNTOUCHED = np.setdiff1d(np.arange(ROWS), TOUCHED)

# Hyper-parameters that float32 holds exactly: tf_keras rounds some of them through float32
# (tf.cast of a Python float), the kernels take them as float64.
CASES = {
    "sgd_momentum": lambda: tf_keras.optimizers.SGD(0.125, momentum=0.875),
    "sgd_nesterov": lambda: tf_keras.optimizers.SGD(0.125, momentum=0.875, nesterov=True),
    "adamax": lambda: tf_keras.optimizers.Adamax(0.0625, beta_1=0.75, beta_2=0.9375),
    "adadelta": lambda: tf_keras.optimizers.Adadelta(1.0, rho=0.875),
    "ftrl": lambda: tf_keras.optimizers.Ftrl(0.125, initial_accumulator_value=0.25),
    "ftrl_regularized": lambda: tf_keras.optimizers.Ftrl(
        0.125,
        learning_rate_power=-0.625,
        initial_accumulator_value=0.5,
        l1_regularization_strength=0.015625,
        l2_regularization_strength=0.03125,
        l2_shrinkage_regularization_strength=0.0625,
        beta=0.125,
    ),
    "rmsprop": lambda: tf_keras.optimizers.RMSprop(0.015625, rho=0.875),
    "rmsprop_momentum_centered": lambda: tf_keras.optimizers.RMSprop(
        0.015625, rho=0.875, momentum=0.5, centered=True
    ),
    "adamw": lambda: tf_keras.optimizers.AdamW(
        0.015625, weight_decay=0.125, beta_1=0.75, beta_2=0.9375
    ),
    "adamw_amsgrad": lambda: tf_keras.optimizers.AdamW(
        0.015625, weight_decay=0.125, beta_1=0.75, beta_2=0.9375, amsgrad=True
    ),
}


def steps(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal([len(TOUCHED), DIM]) for _ in range(STEPS)]


def grad(values, dense_shape=None, dtype=tf.float64):
    indices = tf.constant(TOUCHED, tf.int64)
    return tf.IndexedSlices(tf.cast(values, dtype), indices, dense_shape)


def reference(make, init, grads):
    """tf_keras on a plain tf.Variable of init's dtype."""
    var, opt = tf.Variable(init), make()
    for values in grads:
        opt.apply_gradients([(grad(values, [ROWS, DIM], var.dtype), var)])
    return var.numpy()


def train_ours(opt, table, grads, how):
    """Applies every step; returns what counted them (the wrapper counts its own steps)."""
    shape = None if isinstance(table, sok.DynamicVariable) else [ROWS, DIM]
    stepper = opt if how == "scope" else sok.OptimizerWrapper(opt)
    for values in grads:
        pairs = [(grad(values, shape, table.dtype), table)]
        if how == "scope":
            with sok.OptimizerScope([table]):
                stepper.apply_gradients(pairs)
        else:
            stepper.apply_gradients(pairs)
    return stepper


@pytest.mark.parametrize("how", ["scope", "wrapper"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_static_table_equals_tf_keras_on_touched_rows(case, how):
    make, init, grads = CASES[case], random_table(1, ROWS, DIM, np.float64), steps(2)
    table, opt = sok.Variable(init, dtype=tf.float64), make()
    stepper = train_ours(opt, table, grads, how)
    ours, ref = table.numpy(), reference(make, init, grads)
    np.testing.assert_allclose(ours[TOUCHED], ref[TOUCHED], rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(ours[UNTOUCHED], init[UNTOUCHED])  # lazy
    assert int(stepper.iterations) == STEPS


@pytest.mark.parametrize("how", ["scope", "wrapper"])
@pytest.mark.parametrize(
    "case", ["sgd_momentum", "adamax", "adadelta", "ftrl", "rmsprop_momentum_centered", "adamw"]
)
def test_dynamic_table_equals_tf_keras_on_touched_rows(case, how):
    # DynamicVariable rows are float32.
    make, grads = CASES[case], steps(3)
    table = sok.DynamicVariable(DIM, initializer="random")
    keys = tf.range(ROWS, dtype=tf.int64)
    init = tf.nn.embedding_lookup(table, keys).numpy()  # creates every row
    train_ours(make(), table, grads, how)
    ours, ref = tf.nn.embedding_lookup(table, keys).numpy(), reference(make, init, grads)
    np.testing.assert_allclose(ours[TOUCHED], ref[TOUCHED], rtol=2e-5, atol=1e-6)
    np.testing.assert_array_equal(ours[UNTOUCHED], init[UNTOUCHED])


@pytest.mark.parametrize("case", ["sgd_momentum", "adamax", "rmsprop_momentum_centered"])
def test_in_tf_function(case):
    make, init, grads = CASES[case], random_table(4, ROWS, DIM, np.float64), steps(5)
    table, opt = sok.Variable(init, dtype=tf.float64), make()
    wrapper = sok.OptimizerWrapper(opt)

    @tf.function
    def step(values):
        wrapper.apply_gradients([(grad(values, [ROWS, DIM]), table)])

    for values in grads:
        step(tf.constant(values))
    np.testing.assert_allclose(
        table.numpy()[TOUCHED], reference(make, init, grads)[TOUCHED], rtol=1e-10, atol=1e-12
    )


def test_slots_have_tf_keras_names_and_initial_values():
    table = sok.Variable(random_table(6, ROWS, DIM, np.float64), dtype=tf.float64)
    opt = tf_keras.optimizers.Ftrl(0.1, initial_accumulator_value=0.25)
    values = np.zeros([len(TOUCHED), DIM])
    sok.OptimizerWrapper(opt).apply_gradients([(grad(values, [ROWS, DIM]), table)])
    slots = sok.opt_slots(opt, table)
    assert set(slots) == {"accumulator", "linear"}
    np.testing.assert_array_equal(slots["accumulator"].numpy(), np.full([ROWS, DIM], 0.25))


def test_unsupported_tf_keras_optimizer_names_the_supported_ones():
    table = sok.Variable(random_table(7, ROWS, DIM, np.float64), dtype=tf.float64)
    values = np.zeros([len(TOUCHED), DIM])
    wrapper = sok.OptimizerWrapper(tf_keras.optimizers.Nadam(0.1))
    with pytest.raises(ValueError, match=r"tf_keras\.optimizers .*Adamax.*Adadelta"):
        wrapper.apply_gradients([(grad(values, [ROWS, DIM]), table)])
