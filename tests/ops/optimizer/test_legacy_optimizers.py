"""tf_keras legacy optimizers (tf_keras.optimizers.legacy.*) on sok_lite tables.

The reference is the legacy optimizer itself, applying the same IndexedSlices gradients to a
plain tf.Variable. Its sparse update of SGD, Adagrad, Ftrl, Adamax, Adadelta and RMSprop with
momentum changes only the rows with a gradient, as sok_lite's does: every row must agree. Its
Adam (and RMSprop without momentum) decays the moments of every row at every step, and Adam
moves rows with an old non-zero moment: sok_lite's Adam is "lazy Adam". There, rows with a
gradient at every step (and rows never touched) must agree with the legacy optimizer, and every
row with a lazy reference: the legacy optimizer applied to each row alone, at the global step of
each of that row's updates, so that it sees only that row's own steps.

Static tables are float64, so the comparisons are tight (the formulas are the same, their
terms grouped a little differently); hash tables are float32 only.
"""

import json
import os
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.optim.optimizer_rules import rule_for, unwrap
from tests.common import random_table
from tests.python_json import run_python_json

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")

tf_keras = pytest.importorskip("tf_keras")
legacy = tf_keras.optimizers.legacy

ROOT = Path(__file__).resolve().parents[3]
ROWS, DIM, STEPS = 12, 3, 5
ALWAYS = [0, 3, 7]  # a gradient at every step
NEVER = [5, 10]  # never a gradient
SOMETIMES = [r for r in range(ROWS) if r not in ALWAYS + NEVER]

# id -> (factory, whether the legacy sparse update is lazy)
CASES = {
    "sgd": (lambda: legacy.SGD(0.1), True),
    "sgd_decay": (lambda: legacy.SGD(0.1, decay=0.05), True),
    "momentum": (lambda: legacy.SGD(0.1, momentum=0.9), True),
    "nesterov": (lambda: legacy.SGD(0.1, momentum=0.9, nesterov=True), True),
    "adam": (lambda: legacy.Adam(0.01), False),
    "adam_decay": (lambda: legacy.Adam(0.01, beta_1=0.8, epsilon=1e-3, decay=0.1), False),
    "amsgrad": (lambda: legacy.Adam(0.01, amsgrad=True), False),
    "adagrad": (lambda: legacy.Adagrad(0.1, initial_accumulator_value=0.2, epsilon=0.01), True),
    "rmsprop": (lambda: legacy.RMSprop(0.01, epsilon=0.01), False),
    "rmsprop_centered": (lambda: legacy.RMSprop(0.01, centered=True, epsilon=0.01), False),
    "rmsprop_momentum": (lambda: legacy.RMSprop(0.01, momentum=0.5, epsilon=0.01), True),
    "rmsprop_centered_momentum": (
        lambda: legacy.RMSprop(0.01, momentum=0.5, centered=True, epsilon=0.01),
        True,
    ),
    "ftrl": (
        lambda: legacy.Ftrl(
            0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.02, beta=0.1
        ),
        True,
    ),
    "ftrl_shrinkage": (
        lambda: legacy.Ftrl(
            0.1,
            learning_rate_power=-0.6,
            initial_accumulator_value=0.3,
            l1_regularization_strength=0.01,
            l2_shrinkage_regularization_strength=0.05,
        ),
        True,
    ),
    "adamax": (lambda: legacy.Adamax(0.01, epsilon=1e-3), True),
    "adadelta": (lambda: legacy.Adadelta(1.0, rho=0.9, epsilon=1e-3), True),
}
LAZY = {case: lazy for case, (_, lazy) in CASES.items()}


def make(case):
    return CASES[case][0]()


def steps(seed, dtype=np.float64):
    """(rows, gradient rows) per step: ALWAYS, some SOMETIMES rows, and one row repeated."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(STEPS):
        some = rng.choice(SOMETIMES, size=int(rng.integers(1, 4)), replace=False).tolist()
        rows = np.array(ALWAYS + some + [ALWAYS[0]], np.int64)  # a repeat: summed first
        out.append((rows, rng.standard_normal([rows.size, DIM]).astype(dtype)))
    return out


def grad(rows, g):
    return tf.IndexedSlices(tf.constant(g), tf.constant(rows, tf.int64), [ROWS, DIM])


def run_legacy(case, init, gradient_steps):
    var = tf.Variable(init)
    opt = make(case)
    for rows, g in gradient_steps:
        opt.apply_gradients([(grad(rows, g), var)])
    return var, opt


def run_per_row(case, init, gradient_steps):
    """The lazy reference: each row alone, under its own legacy optimizer whose iterations
    are set to the global step before each of that row's updates."""
    out = init.copy()
    for r in range(ROWS):
        var, opt = tf.Variable(init[r : r + 1]), make(case)
        for t, (rows, g) in enumerate(gradient_steps):
            mine = rows == r
            if mine.any():
                opt.iterations.assign(t)
                row_grad = tf.IndexedSlices(
                    tf.constant(g[mine]), tf.zeros([int(mine.sum())], tf.int64), [1, DIM]
                )
                opt.apply_gradients([(row_grad, var)])
        out[r] = var.numpy()[0]
    return out


def run_ours(case, init, gradient_steps, how):
    table = sok.Variable(init, dtype=init.dtype)
    opt = make(case)
    wrapped = sok.OptimizerWrapper(opt)

    def apply(rows, g):
        pair = [(tf.IndexedSlices(g, rows, [ROWS, DIM]), table)]
        if how == "scope":
            with sok.OptimizerScope([table]):
                opt.apply_gradients(pair)
        else:
            wrapped.apply_gradients(pair)

    fn = tf.function(apply) if how == "wrapper_function" else apply
    for rows, g in gradient_steps:
        fn(tf.constant(rows, tf.int64), tf.constant(g))
    if how != "scope":  # the wrapper counts its own steps, as SOK's does
        assert int(opt.iterations) == 0
        return table, wrapped
    return table, opt


def check_slots(case, table, opt, legacy_var, legacy_opt, rows):
    """Our slots equal the legacy optimizer's (on `rows`), slot for slot."""
    rule = rule_for(unwrap(opt))
    ours = sok.opt_slots(opt, table)
    assert sorted(ours) == sorted(name for name, _ in rule.slots)
    for (name, _), legacy_name in zip(rule.slots, rule.keras_slots, strict=True):
        expected = legacy_opt.get_slot(legacy_var, legacy_name).numpy()
        np.testing.assert_allclose(
            ours[name].numpy()[rows], expected[rows], rtol=1e-9, atol=1e-12, err_msg=case
        )


def test_the_legacy_reference_is_lazy_where_expected():
    """Guards the premise: a legacy optimizer that became lazy (or stopped being) shows here."""
    init, gradient_steps = random_table(1, ROWS, DIM, np.float64), steps(2)
    for case, lazy in LAZY.items():
        legacy_var, _ = run_legacy(case, init, gradient_steps)
        per_row = run_per_row(case, init, gradient_steps)
        same = np.allclose(legacy_var.numpy(), per_row, rtol=1e-9, atol=1e-12)
        assert same == lazy, case
        np.testing.assert_allclose(
            legacy_var.numpy()[ALWAYS + NEVER], per_row[ALWAYS + NEVER], rtol=1e-9, err_msg=case
        )


@pytest.mark.parametrize("how", ["scope", "wrapper", "wrapper_function"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_the_legacy_optimizer(case, how):
    init, gradient_steps = random_table(3, ROWS, DIM, np.float64), steps(4)
    table, opt = run_ours(case, init, gradient_steps, how)
    legacy_var, legacy_opt = run_legacy(case, init, gradient_steps)
    assert int(opt.iterations) == STEPS
    got = table.numpy()
    assert (got[NEVER] == init[NEVER]).all()
    rows = list(range(ROWS)) if LAZY[case] else ALWAYS + NEVER
    np.testing.assert_allclose(
        got[rows], legacy_var.numpy()[rows], rtol=1e-9, atol=1e-12, err_msg=case
    )
    check_slots(case, table, opt, legacy_var, legacy_opt, rows)
    if not LAZY[case]:
        per_row = run_per_row(case, init, gradient_steps)
        np.testing.assert_allclose(got, per_row, rtol=1e-9, atol=1e-12, err_msg=case)


def test_learning_rate_schedule_and_a_dense_variable_in_the_same_call():
    """A schedule drives the step's rate; the dense pair goes to the legacy optimizer, which
    advances iterations once per call."""
    schedule = tf_keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    init, gradient_steps = random_table(5, ROWS, DIM, np.float64), steps(6)
    table, dense = sok.Variable(init, dtype=tf.float64), tf.Variable(np.ones([2], np.float64))
    ref_table, ref_dense = tf.Variable(init), tf.Variable(np.ones([2], np.float64))
    opt, ref_opt = legacy.Adagrad(schedule), legacy.Adagrad(schedule)
    wrapped = sok.OptimizerWrapper(opt)
    for rows, g in gradient_steps:
        dense_grad = tf.constant([0.5, -1.0], tf.float64)
        wrapped.apply_gradients([(grad(rows, g), table), (dense_grad, dense)])
        ref_opt.apply_gradients([(grad(rows, g), ref_table), (dense_grad, ref_dense)])
    np.testing.assert_allclose(table.numpy(), ref_table.numpy(), rtol=1e-9)
    np.testing.assert_allclose(dense.numpy(), ref_dense.numpy(), rtol=1e-12)
    assert int(wrapped.iterations) == STEPS and int(opt.iterations) == 0


@pytest.mark.parametrize("case", ["adamax", "adam_decay", "sgd_decay"])
def test_wrapper_counts_its_own_steps_when_the_optimizer_is_shared(case):
    """As with SOK's wrapper: one optimizer, wrapped for a table and also used alone on a
    tf.Variable, interleaved. Each side's step-dependent terms (bias correction, legacy decay)
    see only its own steps, so both equal a run with two separate optimizers."""
    init, gradient_steps = random_table(11, ROWS, DIM, np.float64), steps(12)
    shared = make(case)
    wrapped = sok.OptimizerWrapper(shared)
    table, plain = sok.Variable(init, dtype=tf.float64), tf.Variable(init)
    for rows, g in gradient_steps:
        wrapped.apply_gradients([(grad(rows, g), table)])
        shared.apply_gradients([(grad(rows, g), plain)])
    assert int(wrapped.iterations) == STEPS and int(shared.iterations) == STEPS
    separate, _ = run_ours(case, init, gradient_steps, "wrapper")
    reference, _ = run_legacy(case, init, gradient_steps)
    np.testing.assert_array_equal(table.numpy(), separate.numpy())
    np.testing.assert_allclose(plain.numpy(), reference.numpy(), rtol=1e-12)


@pytest.mark.parametrize("clip", [{"clipvalue": 0.3}, {"clipnorm": 0.5}, {"global_clipnorm": 0.7}])
def test_clipping_equals_the_legacy_optimizer(clip):
    init, gradient_steps = random_table(7, ROWS, DIM, np.float64), steps(8)
    table, dense = sok.Variable(init, dtype=tf.float64), tf.Variable(np.ones([2], np.float64))
    ref_table, ref_dense = tf.Variable(init), tf.Variable(np.ones([2], np.float64))
    opt, ref_opt = legacy.SGD(0.1, **clip), legacy.SGD(0.1, **clip)
    for rows, g in gradient_steps:
        dense_grad = tf.constant([2.0, -1.0], tf.float64)
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(grad(rows, g), table), (dense_grad, dense)])
        ref_opt.apply_gradients([(grad(rows, g), ref_table), (dense_grad, ref_dense)])
    # sok_lite sums the squares of a norm in float32 (the sum is all-reduced over ranks).
    tol = {"rtol": 1e-6, "atol": 1e-9, "err_msg": str(clip)}
    np.testing.assert_allclose(table.numpy(), ref_table.numpy(), **tol)
    np.testing.assert_allclose(dense.numpy(), ref_dense.numpy(), **tol)
    assert opt.global_clipnorm == clip.get("global_clipnorm")


@pytest.mark.parametrize(
    "case",
    ["momentum", "adam", "adagrad", "rmsprop_centered_momentum", "ftrl", "adamax", "adadelta"],
)
def test_hash_table_equals_the_static_table(case):
    """A DynamicVariable gets the same update as a sok.Variable holding the same rows (float32:
    the two kernels run the same code, so they agree to the last bit or nearly)."""
    init, gradient_steps = random_table(9, ROWS, DIM, np.float32), steps(10, np.float32)
    keys = np.array([-(2**40), -7, 0, 1, 5, 9, 13, 2**33, 77, 78, 79, 80], np.int64)
    table = sok.DynamicVariable(DIM, initializer="zeros")
    table.assign(tf.constant(keys), tf.constant(init))
    static = sok.Variable(init)
    opt, static_opt = sok.OptimizerWrapper(make(case)), sok.OptimizerWrapper(make(case))

    @tf.function
    def step(rows, g):
        opt.apply_gradients([(tf.IndexedSlices(g, tf.gather(keys, rows)), table)])
        static_opt.apply_gradients([(tf.IndexedSlices(g, rows, [ROWS, DIM]), static)])

    for rows, g in gradient_steps:
        step(tf.constant(rows), tf.constant(g))
    stored_keys, values = table.export()
    stored = dict(zip(stored_keys.numpy().tolist(), values.numpy()))
    got = np.stack([stored[k] for k in keys.tolist()])
    np.testing.assert_allclose(got, static.numpy(), rtol=1e-6, atol=1e-7, err_msg=case)
    assert (got[NEVER] == init[NEVER]).all()
    assert int(opt.iterations) == STEPS


@pytest.mark.parametrize("case", ["adam", "rmsprop_centered_momentum", "ftrl", "adadelta"])
def test_dump_and_load_round_trip_the_slots(tmp_path, case):
    init, gradient_steps = random_table(11, ROWS, DIM, np.float32), steps(12, np.float32)
    keys = np.arange(ROWS, dtype=np.int64) * 1000 - 3

    def tables():
        static = sok.Variable(init, name="legacy_static")
        dynamic = sok.DynamicVariable(DIM, initializer="zeros", name="legacy_dynamic")
        dynamic.assign(tf.constant(keys), tf.constant(init))
        return static, dynamic

    def train(opt, static, dynamic, some_steps):
        for rows, g in some_steps:
            opt.apply_gradients(
                [
                    (grad(rows, g), static),
                    (tf.IndexedSlices(tf.constant(g), tf.constant(keys[rows])), dynamic),
                ]
            )

    def state(opt, static, dynamic):
        stored_keys, rows = dynamic.export(with_slots=True)
        order = np.argsort(stored_keys.numpy())
        slots = sok.opt_slots(opt, static)
        return [static.numpy(), rows.numpy()[order]] + [slots[n].numpy() for n in sorted(slots)]

    first = tables()
    opt = sok.OptimizerWrapper(make(case))
    train(opt, *first, gradient_steps[:3])
    sok.dump(tmp_path / "ckpt", list(first), opt)
    manifest = json.loads((tmp_path / "ckpt" / "manifest.json").read_text())
    assert manifest["optimizer"] == type(opt.optimizer).__name__
    assert manifest["tables"][0]["slots"] == [name for name, _ in rule_for(unwrap(opt)).slots]

    second = tables()
    restored = sok.OptimizerWrapper(make(case))
    sok.load(tmp_path / "ckpt", list(second), restored)
    assert int(restored.iterations) == 3
    for a, b in zip(state(opt, *first), state(restored, *second), strict=True):
        np.testing.assert_array_equal(a, b)
    # Training goes on from the same state.
    train(opt, *first, gradient_steps[3:])
    train(restored, *second, gradient_steps[3:])
    for a, b in zip(state(opt, *first), state(restored, *second), strict=True):
        np.testing.assert_array_equal(a, b)


def test_dump_of_a_table_the_legacy_optimizer_applied_itself(tmp_path):
    """Outside OptimizerScope the legacy optimizer updates a table with slots of its own:
    dump saves those, and an incremental dump refuses (its changed rows are unknown)."""
    init, gradient_steps = random_table(13, ROWS, DIM, np.float64), steps(14)
    table, opt = sok.Variable(init, dtype=tf.float64), legacy.Adagrad(0.1)
    for rows, g in gradient_steps:
        opt.apply_gradients([(grad(rows, g), table)])
    sok.dump(tmp_path / "full", [table], opt)
    restored_table = sok.Variable(np.zeros_like(init), dtype=tf.float64)
    restored = legacy.Adagrad(0.1)
    sok.load(tmp_path / "full", [restored_table], restored)
    np.testing.assert_array_equal(restored_table.numpy(), table.numpy())
    np.testing.assert_array_equal(
        sok.opt_slots(restored, restored_table)["accumulator"].numpy(),
        opt.get_slot(table, "accumulator").numpy(),
    )
    with pytest.raises(ValueError, match="outside sok_lite.OptimizerScope"):
        sok.dump(tmp_path / "increment", [table], opt, since_step=0)


def test_unsupported_legacy_optimizer_names_itself():
    table = sok.Variable(random_table(0, ROWS, DIM, np.float64), dtype=tf.float64)
    with pytest.raises(ValueError, match="Nadam has no row-wise sok_lite kernel.*legacy"):
        sok.OptimizerWrapper(legacy.Nadam()).apply_gradients(
            [(grad([1], np.ones([1, DIM])), table)]
        )


def test_scope_routes_legacy_optimizers_and_restores_them():
    base = legacy.Optimizer
    original = base.apply_gradients
    table = sok.Variable(random_table(0, ROWS, DIM, np.float64), dtype=tf.float64)
    opt = legacy.SGD(1.0)
    with sok.OptimizerScope([table]):
        assert base.apply_gradients is not original
        opt.minimize(
            lambda: tf.reduce_sum(
                sok.lookup_sparse(table, tf.ragged.constant([[2]], dtype=tf.int64))
            ),
            [table],
        )
    assert base.apply_gradients is original
    changed = np.any(table.numpy() != random_table(0, ROWS, DIM, np.float64), axis=1)
    assert changed.tolist() == [r == 2 for r in range(ROWS)]


LEGACY_KERAS_SCRIPT = textwrap.dedent(
    """
    import json
    import numpy as np
    import tensorflow as tf
    import sok_lite as sok

    opt = tf.keras.optimizers.legacy.Adam(0.01)  # tf_keras' legacy Adam: tf.keras is tf_keras
    table = sok.Variable(np.ones([6, 4]), dtype=tf.float32)
    dense = tf.Variable(tf.ones([4]))
    wrapped = sok.OptimizerWrapper(opt)
    ids = tf.ragged.constant([[1, 3], [3]], dtype=tf.int64)

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            emb = sok.lookup_sparse(table, ids)
            loss = tf.reduce_sum(emb * dense)
        grads = tape.gradient(loss, [table, dense])
        wrapped.apply_gradients(zip(grads, [table, dense]))
        return loss

    losses = [float(train_step()) for _ in range(3)]
    changed = np.any(table.numpy() != 1.0, axis=1).tolist()
    print(json.dumps({
        "keras": tf.keras.__name__,
        "optimizer": type(opt).__module__,
        "iterations": int(wrapped.iterations),
        "losses": losses,
        "changed": changed,
        "dense_changed": bool(np.any(dense.numpy() != 1.0)),
        "slots": sorted(sok.opt_slots(opt, table)),
    }))
    """
)


def test_tf_use_legacy_keras_training_step_in_a_subprocess():
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    result = run_python_json(LEGACY_KERAS_SCRIPT, cwd=ROOT, env=env)
    assert result["keras"].startswith("tf_keras"), result
    assert result["optimizer"].startswith("tf_keras.src.optimizers.legacy"), result
    assert result["iterations"] == 3
    assert result["changed"] == [False, True, False, True, False, False]
    assert result["dense_changed"]
    assert result["losses"][2] < result["losses"][0]
    assert result["slots"] == ["m", "v"]
