"""bfloat16 optimizer slots beside 16-bit tables (sok.Variable(slot_dtype=tf.bfloat16)).

Oracle: a float32 table with float32 slots holding the same values takes the same step; the
16-bit table must then hold that step's rows and slots rounded (row: as without bfloat16 slots;
slot s: stochastically with the draws of columns (s + 1) * dim + c, key_hash.rounding_bits), and
independently of the mirror, each value must be one of the two bfloat16 neighbours of the float32
result (a relative error below bfloat16's 2^-7).
"""

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

ROWS, DIM = 24, 37
BF16_REL = 2.0**-7  # spacing of bfloat16 relative to the value: a neighbour is within it


def bf16(x) -> np.ndarray:
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def stochastic(want: np.ndarray, draws: np.ndarray) -> np.ndarray:
    return ((want.view(np.uint32) + draws) >> 16).astype(np.uint16)


def apply(table, opt, rows, grads):
    grad = tf.IndexedSlices(tf.constant(grads), tf.constant(rows, tf.int64), [ROWS, DIM])
    with sok.OptimizerScope([table]):
        opt.apply_gradients([(grad, table)])


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_step_with_bf16_slots_is_the_float32_step_rounded(dtype, case):
    make_opt = CASES[case][0]
    rng = np.random.default_rng(11)
    start = rng.standard_normal([ROWS, DIM]).astype(np.float32)
    half = sok.Variable(start, dtype=dtype, slot_dtype=tf.bfloat16, name="emb")
    full = sok.Variable(tf.cast(half, tf.float32), name="emb")
    opt_half, opt_full = make_opt(), make_opt()
    # Step 1 creates the slots; then the float32 side takes the 16-bit side's state, exactly.
    rows = np.sort(rng.choice(ROWS, 10, replace=False))
    grads = rng.standard_normal([rows.size, DIM]).astype(np.float32)
    apply(half, opt_half, rows, grads)
    apply(full, opt_full, rows, grads)
    slots_half, slots_full = sok.opt_slots(opt_half, half), sok.opt_slots(opt_full, full)
    assert slots_half.keys() == slots_full.keys()
    full.assign(tf.cast(half, tf.float32))
    for name, slot in slots_half.items():
        assert slot.dtype == tf.bfloat16, name
        slots_full[name].assign(tf.cast(slot, tf.float32))

    rows = np.sort(rng.choice(ROWS, 12, replace=False))
    grads = rng.standard_normal([rows.size, DIM]).astype(np.float32)
    apply(half, opt_half, rows, grads)
    apply(full, opt_full, rows, grads)
    step = 2
    want = full.numpy()[rows]
    got = half.numpy()[rows]
    if dtype == tf.float16:
        np.testing.assert_array_equal(got.view(np.uint16), want.astype(np.float16).view(np.uint16))
    else:
        draws = key_hash.rounding_bits(half._rounding_seed, step, rows, DIM)
        np.testing.assert_array_equal(got.view(np.uint16), stochastic(want, draws), err_msg=case)
    for s, name in enumerate(slots_half):
        want = slots_full[name].numpy()[rows]
        got = slots_half[name].numpy()[rows]
        draws = key_hash.rounding_bits(half._rounding_seed, step, rows, DIM, col0=(s + 1) * DIM)
        np.testing.assert_array_equal(
            got.view(np.uint16), stochastic(want, draws), err_msg=f"{case} {name}"
        )
        # Independent of the mirror: a bfloat16 neighbour of the float32 value.
        np.testing.assert_allclose(
            got.astype(np.float32), want, rtol=BF16_REL, atol=1e-30, err_msg=f"{case} {name}"
        )


def test_slot_draws_differ_from_the_row_and_from_each_other():
    draws = [key_hash.rounding_bits(5, 3, np.arange(64), DIM, col0=c * DIM) for c in range(4)]
    for a in range(4):
        for b in range(a + 1, 4):
            assert np.mean(draws[a] == draws[b]) < 0.01


def test_bf16_slots_are_unbiased_where_nearest_would_stall():
    """Adagrad's accumulator 1 + g^2 with g^2 = 2^-10: nearest rounding keeps 1.0 forever,
    stochastic rounding moves it to 1 + 2^-7 an eighth of the time (expected value exact)."""
    rows, dim = 512, 64
    table = sok.Variable(
        np.zeros([rows, dim], np.float32),
        dtype=tf.bfloat16,
        slot_dtype=tf.bfloat16,
        name="acc",
    )
    opt = keras.optimizers.Adagrad(0.1, initial_accumulator_value=1.0)
    grad = tf.IndexedSlices(
        tf.fill([rows, dim], 2.0**-5), tf.range(rows, dtype=tf.int64), [rows, dim]
    )
    with sok.OptimizerScope([table]):
        opt.apply_gradients([(grad, table)])
    acc = sok.opt_slots(opt, table)["accumulator"].numpy().astype(np.float64)
    assert set(np.unique(acc).tolist()) <= {1.0, 1.0 + 2.0**-7}
    # 32,768 draws of p = 1/8: standard error of the mean 1.8e-3 * 2^-7.
    np.testing.assert_allclose(acc.mean(), 1.0 + 2.0**-10, atol=5e-5)


def test_bf16_slots_halve_the_slot_memory():
    table = sok.Variable(
        shape=[1000, 16], initializer="zeros", dtype=tf.bfloat16, slot_dtype="bfloat16"
    )
    opt = CASES["adam"][0]()
    apply_rows = np.arange(4)
    grad = tf.IndexedSlices(tf.ones([4, 16]), tf.constant(apply_rows, tf.int64), [1000, 16])
    with sok.OptimizerScope([table]):
        opt.apply_gradients([(grad, table)])
    assert table.slot_dtype == tf.bfloat16
    slots = sok.opt_slots(opt, table)
    assert [s.dtype for s in slots.values()] == [tf.bfloat16, tf.bfloat16]
    assert sum(s.numpy().nbytes for s in slots.values()) == 2 * 1000 * 16 * 2


@pytest.mark.parametrize(
    "dtype,slot_dtype,match",
    [
        (tf.bfloat16, tf.float16, "table 'bad': float16 optimizer slots are not supported"),
        (tf.float16, "float16", "table 'bad': float16 optimizer slots"),
        (tf.float32, tf.bfloat16, "table 'bad': bfloat16 slots need a 16-bit table"),
        (tf.float64, tf.bfloat16, "table 'bad': bfloat16 slots need a 16-bit table"),
        (tf.bfloat16, tf.float64, "table 'bad': slot_dtype float64 is not supported"),
        (tf.bfloat16, "no-such-dtype", "table 'bad': slot_dtype 'no-such-dtype' is not a dtype"),
    ],
)
def test_bad_slot_dtype_is_a_value_error_naming_the_table(dtype, slot_dtype, match):
    with pytest.raises(ValueError, match=match):
        sok.Variable(np.zeros([4, 2]), dtype=dtype, slot_dtype=slot_dtype, name="bad")


def test_float32_slot_dtype_is_the_default():
    for dtype in (tf.float32, tf.bfloat16):
        table = sok.Variable(np.zeros([4, 2]), dtype=dtype, slot_dtype=tf.float32)
        assert table.slot_dtype == tf.float32
    assert sok.Variable(np.zeros([4, 2]), dtype=tf.float64).slot_dtype == tf.float64


@pytest.mark.parametrize(
    "table_dtype,slot_dtypes",
    [
        (tf.float32, [tf.bfloat16, tf.bfloat16]),  # bfloat16 slots need a 16-bit table
        (tf.bfloat16, [tf.bfloat16, tf.float32]),  # all slots alike
        (tf.bfloat16, [tf.float16, tf.float16]),  # no float16 slots
    ],
)
def test_op_refuses_slots_of_a_wrong_dtype(table_dtype, slot_dtypes):
    """The kernel checks what the Python API already refuses (the op is public too)."""
    from sok_lite.ops.optimizer_ops import sparse_apply

    table = tf.Variable(tf.zeros([4, 3], table_dtype))
    slots = [tf.Variable(tf.zeros([4, 3], d)) for d in slot_dtypes]
    hyper = tf.constant([0.1, 0.0, 0.9, 0.999, 1e-7, 1.0], tf.float64)
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"variable 'opt_table' slot \d: variable dtype"
    ):
        sparse_apply(
            table.handle,
            [s.handle for s in slots],
            tf.constant([1], tf.int64),
            tf.ones([1, 3]),
            hyper,
            "adam",
            "opt_table",
            step=1,
        )
