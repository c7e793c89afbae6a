"""Row-wise optimizers on 16-bit tables: one step is the float32 step of a float32 table holding
the same values, rounded back: float16 to nearest even, bfloat16 stochastically with the bits
key_hash.rounding_bits mirrors (deterministic for a table, step and row; unbiased on average).
Slots are float32 and equal the float32 table's."""

import keras
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.tables import key_hash
from tests.ops.optimizer.test_optimizers import CASES

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")

ROWS, DIM = 24, 37  # an odd width: vector loops of the conversions and their tails


def representable(dtype, seed) -> np.ndarray:
    values = np.random.default_rng(seed).standard_normal([ROWS, DIM]).astype(np.float32)
    return values.astype(ml_dtypes.bfloat16 if dtype == tf.bfloat16 else np.float16).astype(
        np.float32
    )


def one_step(table, make_opt, rows, grads):
    opt = make_opt()
    grad = tf.IndexedSlices(tf.constant(grads), tf.constant(rows, tf.int64), [ROWS, DIM])
    with sok.OptimizerScope([table]):
        opt.apply_gradients([(grad, table)])
    return opt


def rounded(dtype, want, table, rows, step) -> np.ndarray:
    """The bits a 16-bit table must hold for float32 rows `want` (global `rows`) after `step`."""
    if dtype == tf.float16:
        return want.astype(np.float16).view(np.uint16)
    draws = key_hash.rounding_bits(table._rounding_seed, step, rows, DIM)
    return ((want.view(np.uint32) + draws) >> 16).astype(np.uint16)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_one_step_is_the_float32_step_rounded(dtype, case):
    make_opt = CASES[case][0]
    values = representable(dtype, seed=1)
    rng = np.random.default_rng(2)
    rows = np.sort(rng.choice(ROWS, 10, replace=False))
    grads = rng.standard_normal([rows.size, DIM]).astype(np.float32)
    full = sok.Variable(values, name="emb")
    half = sok.Variable(values, dtype=dtype, name="emb")
    opt_full = one_step(full, make_opt, rows, grads)
    opt_half = one_step(half, make_opt, rows, grads)

    want = full.numpy()
    got = half.numpy().view(np.uint16)
    assert half.dtype == dtype
    np.testing.assert_array_equal(
        got[rows], rounded(dtype, want[rows], half, rows, step=1), err_msg=case
    )
    untouched = np.setdiff1d(np.arange(ROWS), rows)
    np.testing.assert_array_equal(
        half.numpy()[untouched].astype(np.float32), values[untouched], err_msg=case
    )
    slots_full, slots_half = sok.opt_slots(opt_full, full), sok.opt_slots(opt_half, half)
    assert slots_full.keys() == slots_half.keys()
    for name, slot in slots_half.items():
        assert slot.dtype == tf.float32, name
        np.testing.assert_array_equal(slot.numpy(), slots_full[name].numpy(), err_msg=name)


def test_bfloat16_result_is_a_neighbour_and_deterministic():
    values = representable(tf.bfloat16, seed=3)
    rows = np.arange(ROWS)
    grads = np.random.default_rng(4).standard_normal([ROWS, DIM]).astype(np.float32)
    make_opt = CASES["adam"][0]
    tables = [sok.Variable(values, dtype=tf.bfloat16, name="same") for _ in range(2)]
    full = sok.Variable(values, name="same")
    for table in tables + [full]:
        one_step(table, make_opt, rows, grads)
    a, b = (t.numpy().view(np.uint16) for t in tables)
    np.testing.assert_array_equal(a, b)  # same name, shape, step and rows: same draws
    toward_zero = (full.numpy().view(np.uint32) >> 16).astype(np.uint16)
    assert np.isin(a - toward_zero, [0, 1]).all()
    other = sok.Variable(values, dtype=tf.bfloat16, name="other")
    one_step(other, make_opt, rows, grads)
    assert not np.array_equal(other.numpy().view(np.uint16), a)  # another seed


def test_bfloat16_rounding_is_unbiased_where_nearest_would_stall():
    """1 - 2^-10 lies a quarter of the way from 1 to the next bfloat16 below (1 - 2^-8): nearest
    rounding keeps 1.0 forever, stochastic rounding goes down a quarter of the time."""
    rows, dim = 512, 64
    table = sok.Variable(np.ones([rows, dim], np.float32), dtype=tf.bfloat16, name="ones")
    grad = tf.IndexedSlices(tf.ones([rows, dim]), tf.range(rows, dtype=tf.int64), [rows, dim])
    with sok.OptimizerScope([table]):
        keras.optimizers.SGD(2.0**-10).apply_gradients([(grad, table)])
    got = table.numpy().astype(np.float64)
    assert set(np.unique(got).tolist()) == {1.0 - 2.0**-8, 1.0}
    # 32,768 draws of a {0, 1} choice with p = 1/4: standard error of the mean 2.4e-3 * 2^-8.
    np.testing.assert_allclose(got.mean(), 1.0 - 2.0**-10, atol=4e-5)


def test_float16_several_steps_in_a_function_match_the_rounded_float32_steps():
    """Each step starts from the rounded rows: a float32 table re-rounded after every step."""
    values = representable(tf.float16, seed=5)
    half = sok.Variable(values, dtype=tf.float16)
    full = sok.Variable(values)
    opts = [keras.optimizers.Adagrad(0.1), keras.optimizers.Adagrad(0.1)]

    @tf.function
    def step(table, opt, rows, grads):
        grad = tf.IndexedSlices(grads, rows, [ROWS, DIM])
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(grad, table)])

    rng = np.random.default_rng(6)
    for _ in range(3):
        rows = tf.constant(np.sort(rng.choice(ROWS, 8, replace=False)), tf.int64)
        grads = tf.constant(rng.standard_normal([8, DIM]).astype(np.float32))
        step(half, opts[0], rows, grads)
        step(full, opts[1], rows, grads)
        full.assign(full.numpy().astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(half.numpy().astype(np.float32), full.numpy())
