"""16-bit tables (bfloat16, float16): lookups read the rows as float32 and combine them in float32,
so a lookup and its gradient equal those of a float32 table holding the same (16-bit-exact)
values, bit for bit; against NumPy the tolerance is float32's."""

import keras
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")

HALF = [tf.bfloat16, tf.float16]
NUMPY_HALF = {tf.bfloat16: ml_dtypes.bfloat16, tf.float16: np.float16}
ROWS, DIM = 37, 9


def representable(dtype, shape, seed) -> np.ndarray:
    """Float32 values that `dtype` holds exactly."""
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return values.astype(NUMPY_HALF[dtype]).astype(np.float32)


def ragged_ids(seed, batch=16, rows=ROWS):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 6, batch)
    ids = [rng.integers(0, rows, n).tolist() for n in lengths]
    return tf.ragged.constant(ids, dtype=tf.int64, ragged_rank=1, inner_shape=())


def numpy_combine(table, ids, weights, combiner):
    out = np.zeros([ids.nrows(), table.shape[1]], np.float64)
    for b, sample in enumerate(ids.to_list()):
        w = np.ones(len(sample)) if weights is None else np.asarray(weights.to_list()[b])
        if not sample:
            continue
        total = (w[:, None] * table[sample].astype(np.float64)).sum(0)
        denom = {"sum": 1.0, "mean": w.sum(), "sqrtn": np.sqrt((w * w).sum())}[combiner]
        out[b] = total / denom if denom else 0.0
    return out


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("weighted", [False, True])
def test_forward_and_gradient_equal_a_float32_table(dtype, combiner, weighted):
    values = representable(dtype, [ROWS, DIM], seed=1)
    half = sok.Variable(values, dtype=dtype, name="half")
    full = sok.Variable(values, dtype=tf.float32, name="full")
    assert half.dtype == dtype
    np.testing.assert_array_equal(tf.cast(half, tf.float32).numpy(), values)
    ids = ragged_ids(2)
    weights = None
    if weighted:
        w = np.random.default_rng(3).uniform(0.5, 2.0, int(ids.values.shape[0]))
        weights = tf.RaggedTensor.from_row_splits(w.astype(np.float32), ids.row_splits)
    upstream = tf.constant(np.random.default_rng(4).standard_normal([16, DIM]), tf.float32)

    def run(table):
        with tf.GradientTape() as tape:
            out = sok.lookup_sparse(table, ids, weights, combiner)
            loss = tf.reduce_sum(out * upstream)
        return out, tape.gradient(loss, table)

    out_half, grad_half = run(half)
    out_full, grad_full = run(full)
    assert out_half.dtype == tf.float32
    np.testing.assert_array_equal(out_half.numpy(), out_full.numpy())
    # Float32 arithmetic on exact inputs: float32's epsilon per accumulated term.
    want = numpy_combine(values, ids, weights, combiner)
    np.testing.assert_allclose(out_half.numpy(), want, rtol=1e-5, atol=1e-5)
    assert isinstance(grad_half, tf.IndexedSlices)
    assert grad_half.values.dtype == tf.float32
    np.testing.assert_array_equal(grad_half.indices.numpy(), grad_full.indices.numpy())
    np.testing.assert_array_equal(grad_half.values.numpy(), grad_full.values.numpy())
    assert grad_half.dense_shape.numpy().tolist() == [ROWS, DIM]


@pytest.mark.parametrize("dtype", HALF)
def test_inside_tf_function(dtype):
    values = representable(dtype, [ROWS, DIM], seed=5)
    half = sok.Variable(values, dtype=dtype)
    ids = ragged_ids(6)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            out = sok.lookup_sparse(half, ids, combiners="mean")
            loss = tf.reduce_sum(out)
        return out, tape.gradient(loss, half)

    out, grad = step()
    np.testing.assert_allclose(out.numpy(), numpy_combine(values, ids, None, "mean"), rtol=1e-5)
    assert grad.values.dtype == tf.float32


def test_mixed_tables_in_one_call():
    """bfloat16, float16 and float32 tables read and combine in one call (all float32 rows)."""
    tables, ids, wants = [], [], []
    for t, dtype in enumerate([tf.bfloat16, tf.float32, tf.float16]):
        values = representable(tf.bfloat16 if dtype == tf.float32 else dtype, [ROWS, DIM], t)
        tables.append(sok.Variable(values, dtype=dtype, name=f"t{t}"))
        ids.append(ragged_ids(10 + t))
        wants.append(numpy_combine(values, ids[-1], None, "sum"))
    outs = sok.lookup_sparse(tables, ids)
    for out, want in zip(outs, wants):
        assert out.dtype == tf.float32
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", HALF)
def test_initializer_rounds_the_float32_rows_to_nearest(dtype):
    init = keras.initializers.RandomNormal(stddev=0.3, seed=7)
    full = sok.Variable(shape=[ROWS, DIM], initializer=init)
    half = sok.Variable(shape=[ROWS, DIM], initializer=init, dtype=dtype)
    want = full.numpy().astype(NUMPY_HALF[dtype])
    np.testing.assert_array_equal(half.numpy().view(np.uint16), want.view(np.uint16))


def test_half_table_memory_is_half():
    half = sok.Variable(np.zeros([ROWS, DIM], np.float32), dtype=tf.bfloat16)
    assert half.numpy().nbytes == ROWS * DIM * 2


@pytest.mark.parametrize("dtype", [tf.int32, tf.complex64, tf.string])
def test_unsupported_dtypes_name_the_table(dtype):
    with pytest.raises(ValueError, match=r"table 'items': dtype \w+ is not supported"):
        sok.Variable(np.zeros([3, 2]), dtype=dtype, name="items")


def test_gradient_of_a_half_table_must_be_float32():
    half = sok.Variable(np.zeros([4, 2], np.float32), dtype=tf.bfloat16, name="items")
    grad = tf.IndexedSlices(tf.zeros([1, 2], tf.bfloat16), tf.constant([0], tf.int64), [4, 2])
    opt = keras.optimizers.SGD(0.1)
    with pytest.raises(ValueError, match="gradient of 'items' has dtype bfloat16"):
        with sok.OptimizerScope([half]):
            opt.apply_gradients([(grad, half)])
