"""16-bit DynamicVariable tables (dtype bfloat16 / float16): the values are stored in 16 bits,
read as float32. Oracle: a float32 hash table holding the same (rounded) values. Lookups and
gradients equal it; one optimizer step equals its float32 step rounded back (float16 to nearest
even, bfloat16 stochastically with the draws key_hash.rounding_bits mirrors, keyed by the KEY);
slots are float32 and equal its slots."""

import keras
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.tables import key_hash
from tests.common import ragged, rows_by_key
from tests.ops.optimizer.test_optimizers import CASES

DIM = 37  # every position of RoundingBits' four 16-bit draws, and an odd packed width
HALF = [tf.bfloat16, tf.float16]
NUMPY = {tf.bfloat16: ml_dtypes.bfloat16, tf.float16: np.float16}
# One unit in the last place at 1.0: a value rounded to 16 bits is within eps * |x| of x.
EPS = {tf.bfloat16: 2.0**-7, tf.float16: 2.0**-10}
KEYS = np.array([-(2**62), -3, 0, 11, 2**33, 2**40 + 7], np.int64)


def rows_of(table, keys, with_slots=False) -> np.ndarray:
    got = rows_by_key(table, with_slots)
    return np.stack([got[k] for k in keys.tolist()])


def rounded(dtype, x) -> np.ndarray:
    return np.asarray(x, np.float32).astype(NUMPY[dtype]).astype(np.float32)


def twin(half, keys) -> sok.DynamicVariable:
    """A float32 table holding exactly the rows of `half` for `keys`."""
    full = sok.DynamicVariable(half.dimension, name="full")
    full.assign(tf.constant(keys), rows_of(half, keys))
    return full


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
def test_new_rows_are_the_initializer_rounded_to_nearest(dtype):
    init = keras.initializers.RandomNormal(stddev=3.0, seed=7)
    half = sok.DynamicVariable(DIM, initializer=init, dtype=dtype, name="t")
    full = sok.DynamicVariable(DIM, initializer=init, name="t")
    got = tf.nn.embedding_lookup(half, KEYS).numpy()
    want = tf.nn.embedding_lookup(full, KEYS).numpy()
    assert half.dtype == dtype and got.dtype == np.float32
    np.testing.assert_array_equal(got, rounded(dtype, want))
    np.testing.assert_array_equal(rows_of(half, KEYS), got)
    # A key not admitted yet (min_count) reads what its row will hold.
    pending = sok.DynamicVariable(DIM, initializer=init, dtype=dtype, name="t", min_count=2)
    np.testing.assert_array_equal(tf.nn.embedding_lookup(pending, KEYS).numpy(), got)
    assert int(pending.size()) == 0
    # The fused one-rank lookup_sparse: new keys (stored, or pending) combined after admission.
    for min_count in (1, 3):
        fused = sok.DynamicVariable(
            DIM, initializer=init, dtype=dtype, name="t", min_count=min_count
        )
        out = sok.lookup_sparse(fused, ragged([KEYS[:2].tolist(), [KEYS[2]], []]))
        np.testing.assert_array_equal(out.numpy()[0], got[0] + got[1])
        np.testing.assert_array_equal(out.numpy()[1:], np.stack([got[2], np.zeros(DIM)]))
        assert int(fused.size()) == (3 if min_count == 1 else 0)


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_lookup_and_gradient_equal_a_float32_table_of_the_same_values(dtype, combiner):
    half = sok.DynamicVariable(
        DIM, initializer=keras.initializers.RandomNormal(seed=1), dtype=dtype
    )
    sok.lookup_sparse(half, ragged([KEYS.tolist()]))
    full = twin(half, KEYS)
    rng = np.random.default_rng(2)
    ids = ragged([[KEYS[i] for i in rng.integers(0, len(KEYS), n)] for n in (3, 0, 1, 5, 2)])
    weights = tf.RaggedTensor.from_row_splits(
        rng.uniform(0.5, 2.0, int(ids.values.shape[0])).astype(np.float32), ids.row_splits
    )
    upstream = tf.constant(rng.standard_normal([5, DIM]).astype(np.float32))
    results = []
    for table in (half, full):
        with tf.GradientTape() as tape:
            out = sok.lookup_sparse(table, ids, sp_weights=weights, combiners=combiner)
            loss = tf.reduce_sum(out * upstream)
        grad = tape.gradient(loss, table)
        order = np.argsort(grad.indices.numpy())
        results.append((out.numpy(), grad.indices.numpy()[order], grad.values.numpy()[order]))
    (out_h, idx_h, g_h), (out_f, idx_f, g_f) = results
    assert out_h.dtype == np.float32 and g_h.dtype == np.float32
    # Same float32 values, same float32 math: equal up to the order of float32 sums.
    np.testing.assert_allclose(out_h, out_f, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(idx_h, idx_f)
    np.testing.assert_allclose(g_h, g_f, rtol=1e-6, atol=1e-6)
    # And the fused one-rank combine equals the plain row reads.
    plain = tf.nn.embedding_lookup(half, KEYS).numpy()
    np.testing.assert_array_equal(plain, rows_of(full, KEYS))


def one_step(table, opt, keys, grads):
    with sok.OptimizerScope([table]):
        opt.apply_gradients([(tf.IndexedSlices(tf.constant(grads), tf.constant(keys)), table)])


def rounded_bits(dtype, want, table, keys, step) -> np.ndarray:
    """The 16-bit patterns a table must hold for float32 rows `want` of `keys` after `step`."""
    if dtype == tf.float16:
        return want.astype(np.float16).view(np.uint16)
    draws = key_hash.rounding_bits(table._rounding_seed, step, keys, want.shape[1])
    return ((want.view(np.uint32) + draws) >> 16).astype(np.uint16)


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_one_step_is_the_float32_step_rounded(dtype, case):
    make_opt = CASES[case][0]
    half = sok.DynamicVariable(
        DIM, initializer=keras.initializers.RandomNormal(seed=3), dtype=dtype
    )
    sok.lookup_sparse(half, ragged([KEYS.tolist()]))
    full = twin(half, KEYS)
    rng = np.random.default_rng(4)
    step_keys = np.sort(rng.choice(KEYS, 4, replace=False))
    grads = rng.standard_normal([4, DIM]).astype(np.float32)
    one_step(half, make_opt(), step_keys, grads)
    one_step(full, make_opt(), step_keys, grads)

    want = rows_of(full, step_keys, with_slots=True)
    got = rows_of(half, step_keys, with_slots=True)
    bits = got[:, :DIM].astype(NUMPY[dtype]).view(np.uint16)
    np.testing.assert_array_equal(
        bits, rounded_bits(dtype, want[:, :DIM].copy(), half, step_keys, step=1), err_msg=case
    )
    # The eps bound the exact check implies: one 16-bit unit of the float32 result at most.
    np.testing.assert_allclose(got[:, :DIM], want[:, :DIM], rtol=EPS[dtype], atol=1e-30)
    np.testing.assert_array_equal(got[:, DIM:], want[:, DIM:], err_msg=f"{case}: slots")
    untouched = np.setdiff1d(KEYS, step_keys)
    np.testing.assert_array_equal(rows_of(half, untouched), rows_of(full, untouched))


def test_bfloat16_draws_follow_the_key_not_the_storage_order():
    """Two tables of one name hold the keys in opposite orders: the same bits after a step."""
    init = keras.initializers.RandomNormal(seed=5)
    a = sok.DynamicVariable(DIM, initializer=init, dtype=tf.bfloat16, name="same")
    b = sok.DynamicVariable(DIM, initializer=init, dtype=tf.bfloat16, name="same")
    sok.lookup_sparse(a, ragged([KEYS.tolist()]))
    sok.lookup_sparse(b, ragged([KEYS[::-1].tolist()]))
    grads = np.random.default_rng(6).standard_normal([len(KEYS), DIM]).astype(np.float32)
    one_step(a, keras.optimizers.Adam(0.01), KEYS, grads)
    one_step(b, keras.optimizers.Adam(0.01), KEYS, grads)
    np.testing.assert_array_equal(rows_of(a, KEYS, True), rows_of(b, KEYS, True))
    other = sok.DynamicVariable(DIM, initializer=init, dtype=tf.bfloat16, name="other")
    sok.lookup_sparse(other, ragged([KEYS.tolist()]))
    one_step(other, keras.optimizers.Adam(0.01), KEYS, grads)
    assert not np.array_equal(rows_of(other, KEYS), rows_of(a, KEYS))  # another seed


def test_bfloat16_rounding_is_unbiased_where_nearest_would_stall():
    """1 - 2^-10 lies a quarter of the way from 1 to the next bfloat16 below: nearest rounding
    keeps 1.0 forever, stochastic rounding goes down a quarter of the time."""
    keys, dim = np.arange(512, dtype=np.int64), 64
    table = sok.DynamicVariable(dim, initializer="ones", dtype=tf.bfloat16)
    sok.lookup_sparse(table, tf.RaggedTensor.from_tensor(keys.reshape(-1, 1)))
    one_step(table, keras.optimizers.SGD(2.0**-10), keys, np.ones([512, dim], np.float32))
    got = rows_of(table, keys).astype(np.float64)
    assert set(np.unique(got).tolist()) == {1.0 - 2.0**-8, 1.0}
    # 32,768 draws of a {0, 1} choice with p = 1/4: standard error of the mean 2.4e-3 * 2^-8.
    np.testing.assert_allclose(got.mean(), 1.0 - 2.0**-10, atol=4e-5)


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
def test_several_steps_in_a_function_on_many_keys(dtype):
    """Thousands of keys per step (parallel chunks): each step equals the float32 step of the
    rows as stored, within one 16-bit unit; the slots stay float32 state of their own."""
    rng = np.random.default_rng(7)
    universe = np.unique(rng.integers(-(2**62), 2**62, size=3000))
    half = sok.DynamicVariable(8, initializer=keras.initializers.RandomNormal(seed=8), dtype=dtype)
    sok.lookup_sparse(half, tf.RaggedTensor.from_tensor(universe.reshape(-1, 1)))
    opt = keras.optimizers.Adagrad(0.1)

    @tf.function
    def step(keys, grads):
        with sok.OptimizerScope([half]):
            opt.apply_gradients([(tf.IndexedSlices(grads, keys), half)])

    for _ in range(3):
        before = rows_of(half, universe, with_slots=True)
        idx = np.sort(rng.choice(len(universe), size=2000, replace=False))
        g = rng.standard_normal([2000, 8]).astype(np.float32)
        step(tf.constant(universe[idx]), tf.constant(g))
        after = rows_of(half, universe, with_slots=True)
        # Keras' Adagrad in float32 from the stored rows (slots start at 0.1 before step 1).
        acc = (before[idx, 8:] if before.shape[1] > 8 else np.float32(0.1)) + g * g
        want = before[idx, :8] - 0.1 * g / np.sqrt(acc + 1e-7)
        np.testing.assert_allclose(after[idx, 8:], acc, rtol=1e-6)
        np.testing.assert_allclose(after[idx, :8], want, rtol=EPS[dtype], atol=1e-6)
        np.testing.assert_array_equal(after[idx, :8], rounded(dtype, after[idx, :8]))


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
def test_assign_export_and_replace_rows_convert(dtype):
    values = np.random.default_rng(9).standard_normal([len(KEYS), DIM]).astype(np.float32) * 5
    table = sok.DynamicVariable(DIM, dtype=dtype)
    table.assign(KEYS, values)
    np.testing.assert_array_equal(rows_of(table, KEYS), rounded(dtype, values))
    # With slots: the value rounds, the float32 slots are kept as given.
    rows = np.concatenate([values, values * 1e-3], axis=1)
    table.replace_rows(tf.constant(KEYS), tf.constant(rows))
    got = rows_of(table, KEYS, with_slots=True)
    np.testing.assert_array_equal(got[:, :DIM], rounded(dtype, values))
    np.testing.assert_array_equal(got[:, DIM:], values * 1e-3)


@pytest.mark.parametrize(
    "dtype,match",
    [
        (tf.float64, "table 'bad': a DynamicVariable stores float32, bfloat16 or float16"),
        (tf.int32, "table 'bad': dtype int32 is not supported"),
        ("text", "table 'bad': 'text' is not a dtype"),
    ],
)
def test_unsupported_dtype_names_the_table(dtype, match):
    with pytest.raises(ValueError, match=match):
        sok.DynamicVariable(4, dtype=dtype, name="bad")
