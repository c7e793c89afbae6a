"""OptimizerScope against Keras itself and against a NumPy lazy reference of Keras' formulas."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.ops.optimizer_ops import sparse_apply
from tests.common import random_table
from tests.gpu import gpu_reference
from tests.ops.optimizer.lazy_reference import LazyOptimizer

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")

ROWS, DIM, STEPS = 20, 4, 6

CASES = {  # id -> (factory, reference name)
    "sgd": (lambda: keras.optimizers.SGD(0.1), "sgd"),
    "momentum": (lambda: keras.optimizers.SGD(0.1, momentum=0.9), "sgd"),
    "nesterov": (lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True), "sgd"),
    "adam": (lambda: keras.optimizers.Adam(0.01), "adam"),
    "amsgrad": (lambda: keras.optimizers.Adam(0.01, amsgrad=True), "adam"),
    "adamw": (lambda: keras.optimizers.AdamW(0.01, weight_decay=0.1), "adamw"),
    "adagrad": (lambda: keras.optimizers.Adagrad(0.1), "adagrad"),
    "rmsprop": (lambda: keras.optimizers.RMSprop(0.01), "rmsprop"),
    "rmsprop_centered_momentum": (
        lambda: keras.optimizers.RMSprop(0.01, momentum=0.5, centered=True),
        "rmsprop",
    ),
    "ftrl": (
        lambda: keras.optimizers.Ftrl(
            0.1,
            l1_regularization_strength=0.01,
            l2_regularization_strength=0.02,
            beta=0.1,
            l2_shrinkage_regularization_strength=0.01,
        ),
        "ftrl",
    ),
    "adamax": (lambda: keras.optimizers.Adamax(0.01), "adamax"),
    "adadelta": (lambda: keras.optimizers.Adadelta(1.0, rho=0.9), "adadelta"),
}


def sparse_steps(seed, all_rows=False):
    rng = np.random.default_rng(seed)
    for _ in range(STEPS):
        k = ROWS if all_rows else int(rng.integers(1, ROWS // 2))
        rows = np.sort(rng.choice(ROWS, size=k, replace=False))
        yield rows, rng.standard_normal([k, DIM]).astype(np.float32)


def run_ours(make_opt, steps, init, use_function=False):
    table = sok.Variable(init)
    opt = make_opt()

    def apply(rows, g):
        grad = tf.IndexedSlices(g, rows, [ROWS, DIM])
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(grad, table)])

    fn = tf.function(apply, reduce_retracing=True) if use_function else apply
    for rows, g in steps:
        fn(tf.constant(rows, tf.int64), tf.constant(g))
    return table, opt


def run_keras(make_opt, steps, init):
    var = tf.Variable(init)
    opt = make_opt()
    for rows, g in steps:
        grad = tf.IndexedSlices(tf.constant(g), tf.constant(rows, tf.int64), [ROWS, DIM])
        opt.apply_gradients([(grad, var)])
    return var


def run_reference(make_opt, ref_name, steps, init):
    opt = make_opt()
    ref = LazyOptimizer(ref_name, opt.get_config(), init.shape)
    w = init.copy()
    for rows, g in steps:
        ref.step(w, rows, g, float(opt.learning_rate))
    return w, ref


@pytest.mark.parametrize("case", ["sgd", "adagrad"])
def test_equals_keras_exactly_on_sparse_steps(case):
    make, _ = CASES[case]
    init = random_table(1, ROWS, DIM)
    ours, _ = run_ours(make, sparse_steps(2), init)
    keras_var = run_keras(make, sparse_steps(2), init)
    np.testing.assert_allclose(ours.numpy(), keras_var.numpy(), rtol=1e-6, err_msg=case)


@pytest.mark.parametrize("case", sorted(CASES))
def test_reference_equals_keras_when_every_row_is_touched(case):
    make, ref_name = CASES[case]
    init = random_table(3, ROWS, DIM)
    w, _ = run_reference(make, ref_name, sparse_steps(4, all_rows=True), init)
    keras_var = run_keras(make, sparse_steps(4, all_rows=True), init)
    np.testing.assert_allclose(w, keras_var.numpy(), rtol=2e-5, atol=1e-6, err_msg=case)


@pytest.mark.parametrize("use_function", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_lazy_reference_on_sparse_steps(case, use_function):
    make, ref_name = CASES[case]
    init = random_table(5, ROWS, DIM)
    ours, opt = run_ours(make, sparse_steps(6), init, use_function)
    w, ref = run_reference(make, ref_name, sparse_steps(6), init)
    params = opt.get_config()
    np.testing.assert_allclose(ours.numpy(), w, rtol=2e-5, atol=1e-6, err_msg=f"{case} {params}")
    assert int(opt.iterations) == STEPS
    slots = sok.opt_slots(opt, ours)
    if ref_name in ("adam", "adamw"):
        np.testing.assert_allclose(slots["m"].numpy(), ref.s["m"], rtol=2e-5, atol=1e-7)
        np.testing.assert_allclose(slots["v"].numpy(), ref.s["v"], rtol=2e-5, atol=1e-7)
    for slot in slots.values():
        assert slot.shape == ours.shape and slot.mode == ours.mode and not slot.trainable


def test_untouched_rows_and_slots_do_not_change():
    init = random_table(7, ROWS, DIM)
    ours, opt = run_ours(CASES["adam"][0], [(np.array([3]), np.ones([1, DIM], np.float32))], init)
    changed = np.any(ours.numpy() != init, axis=1)
    assert changed.tolist() == [r == 3 for r in range(ROWS)]
    m = sok.opt_slots(opt, ours)["m"].numpy()
    assert np.count_nonzero(np.any(m != 0, axis=1)) == 1


def test_learning_rate_schedule_follows_iterations():
    sched = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    steps = list(sparse_steps(8))
    init = random_table(8, ROWS, DIM)
    ours, _ = run_ours(lambda: keras.optimizers.SGD(sched), steps, init)
    w = init.copy()
    for i, (rows, g) in enumerate(steps):
        w[rows] -= g * np.float32(0.1 * 0.5**i)
    np.testing.assert_allclose(ours.numpy(), w, rtol=1e-6)


@pytest.mark.parametrize("clip", [{"clipvalue": 0.3}, {"clipnorm": 0.5}, {"global_clipnorm": 0.7}])
def test_clipping_with_a_dense_variable_in_the_same_call_equals_keras(clip):
    rng = np.random.default_rng(9)
    init, dense_init = random_table(9, ROWS, DIM), rng.standard_normal([3]).astype(np.float32)
    table, dense = sok.Variable(init), tf.Variable(dense_init)
    ref_table, ref_dense = tf.Variable(init), tf.Variable(dense_init)
    opt, ref_opt = keras.optimizers.SGD(0.1, **clip), keras.optimizers.SGD(0.1, **clip)
    for rows, g in sparse_steps(10):
        grad = tf.IndexedSlices(tf.constant(g), tf.constant(rows, tf.int64), [ROWS, DIM])
        dense_grad = tf.constant(rng.standard_normal([3]).astype(np.float32))
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(grad, table), (dense_grad, dense)])
        ref_opt.apply_gradients([(grad, ref_table), (dense_grad, ref_dense)])
    np.testing.assert_allclose(table.numpy(), ref_table.numpy(), rtol=1e-5, err_msg=str(clip))
    np.testing.assert_allclose(dense.numpy(), ref_dense.numpy(), rtol=1e-5, err_msg=str(clip))
    assert int(opt.iterations) == STEPS and opt.global_clipnorm == clip.get("global_clipnorm")


def test_wrapper_and_native_optimizers_use_the_same_kernels():
    init = random_table(11, ROWS, DIM)
    steps = list(sparse_steps(12))
    via_scope, _ = run_ours(CASES["adam"][0], steps, init)
    for opt in (sok.OptimizerWrapper(keras.optimizers.Adam(0.01)), sok.optimizers.Adam(0.01)):
        table = sok.Variable(init)
        for rows, g in steps:
            grad = tf.IndexedSlices(tf.constant(g), tf.constant(rows, tf.int64), [ROWS, DIM])
            opt.apply_gradients([(grad, table)])
        np.testing.assert_array_equal(table.numpy(), via_scope.numpy())
        assert int(opt.iterations) == STEPS


def test_sok_style_usage_with_lookup_gradients():
    table = sok.Variable(np.ones([10, 2]), dtype=tf.float32)
    dense = tf.Variable(1.0)
    emb_var, other_var = sok.split_embedding_variable_from_others([table, dense])
    assert emb_var == [table] and other_var == [dense]
    emb_opt, dense_opt = keras.optimizers.Adam(0.1), keras.optimizers.SGD(0.1)
    with tf.GradientTape() as tape:
        out = sok.lookup_sparse(table, tf.ragged.constant([[1, 2], [2]], dtype=tf.int64))
        loss = tf.reduce_sum(out) * dense
    emb_grads, other_grads = tape.gradient(loss, [emb_var, other_var])
    with sok.OptimizerScope(emb_var):
        emb_opt.apply_gradients(zip(emb_grads, emb_var))
    dense_opt.apply_gradients(zip(other_grads, other_var))
    changed = np.any(table.numpy() != 1.0, axis=1)
    assert changed.tolist() == [False, True, True] + [False] * 7
    assert dense.numpy() != 1.0


def test_scope_restores_keras_on_exit():
    original = keras.optimizers.Optimizer.apply_gradients
    with sok.OptimizerScope([]):
        assert keras.optimizers.Optimizer.apply_gradients is not original
    assert keras.optimizers.Optimizer.apply_gradients is original


@pytest.mark.parametrize(
    "grad,match",
    [
        (
            tf.IndexedSlices(tf.ones([1, DIM], tf.float64), tf.constant([1], tf.int64)),
            "dtype float64",
        ),
        (tf.IndexedSlices(tf.ones([1, DIM + 1]), tf.constant([1], tf.int64)), "shape"),
    ],
)
def test_mismatched_gradient_names_the_table(grad, match):
    table = sok.Variable(random_table(0, ROWS, DIM), name="users")
    with pytest.raises(ValueError, match=f"gradient of 'users'.*{match}"):
        with sok.OptimizerScope([table]):
            keras.optimizers.SGD(0.1).apply_gradients([(grad, table)])


def test_unsupported_optimizer():
    table = sok.Variable(random_table(0, ROWS, DIM))
    grad = tf.IndexedSlices(tf.ones([1, DIM]), tf.constant([1], tf.int64))
    with pytest.raises(ValueError, match="Lion has no row-wise sok_lite kernel"):
        with sok.OptimizerScope([table]):
            keras.optimizers.Lion().apply_gradients([(grad, table)])


def test_nan_gradients_propagate():
    table = sok.Variable(random_table(0, ROWS, DIM))
    grad = tf.IndexedSlices(tf.fill([1, DIM], np.nan), tf.constant([2], tf.int64))
    with sok.OptimizerScope([table]):
        keras.optimizers.Adam(0.1).apply_gradients([(grad, table)])
    assert np.isnan(table.numpy()[2]).all() and not np.isnan(table.numpy()[3]).any()


@pytest.mark.parametrize("kind,params,num_slots", gpu_reference.OPTIMIZER_CASES)
def test_gpu_harness_reference_mirrors_the_cpu_kernel(kind, params, num_slots):
    """tests/gpu/gpu_reference.py (what the CUDA kernels are checked against on a GPU) follows
    the CPU kernel term by term: equal to the bit, but for FTRL's pow. The kernel's pow is
    Eigen's, whose version comes with each TensorFlow's headers: an ulp or two off NumPy's,
    which FTRL's quotient of near-cancelling terms grows to ~1.5e-6 relative (TF 2.16)."""
    rng = np.random.default_rng(num_slots)
    var = rng.standard_normal([30, DIM]).astype(np.float32)
    slots = [rng.uniform(0.1, 1.0, [30, DIM]).astype(np.float32) for _ in range(num_slots)]
    if kind == "rmsprop":  # centered: average_grad^2 <= velocity, the root stays real
        slots[-1] *= np.float32(0.1)
    table, slot_vars = tf.Variable(var), [tf.Variable(s) for s in slots]
    for _ in range(2):
        rows = rng.choice(30, size=12, replace=False).astype(np.int64)
        g = rng.standard_normal([12, DIM]).astype(np.float32)
        hyper = np.array([0.05, 0.01] + params, np.float64)
        sparse_apply(table.handle, [s.handle for s in slot_vars], rows, g, hyper, kind)
        gpu_reference.apply_rows(kind, 0.05, 0.01, params, rows, g, var, slots)
    tol = {"rtol": 1e-5, "atol": 1e-7} if kind == "ftrl" else {"rtol": 0, "atol": 0}
    np.testing.assert_allclose(table.numpy(), var, **tol)
    for got, expected in zip(slot_vars, slots, strict=True):
        np.testing.assert_allclose(got.numpy(), expected, **tol)
