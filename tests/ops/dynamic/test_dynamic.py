"""DynamicVariable: lookups, gradients, optimizers, policies and bad input, on one rank."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.io.serving_init import initial_rows
from tests.common import ragged, rows_by_key
from tests.ops.optimizer.lazy_reference import LazyOptimizer


def test_mixed_with_static_tables_matches_tf_lookup(device):
    rng = np.random.default_rng(0)
    static = sok.Variable(rng.standard_normal([6, 3]), dtype=tf.float32)
    dynamic = sok.DynamicVariable(3, initializer=keras.initializers.RandomUniform(seed=1))
    keys = [[2**40, -5], [], [7, 2**40, 7]]
    weights = [[0.5, 2.0], [], [1.0, 1.5, 0.25]]
    with tf.GradientTape() as tape:
        s_out, d_out = sok.lookup_sparse(
            [static, dynamic],
            [ragged([[1], [2, 3], []]), ragged(keys)],
            [None, ragged(weights, tf.float32)],
            combiners=["sum", "mean"],
        )
        loss = tf.reduce_sum(d_out * np.arange(9.0).reshape(3, 3).astype(np.float32))
    rows = rows_by_key(dynamic)
    assert sorted(rows) == [-5, 7, 2**40]
    # Reference: the same rows in a dense table, looked up by TF.
    order = sorted(rows)
    dense = tf.Variable(np.stack([rows[k] for k in order]))
    remap = [[order.index(k) for k in r] for r in keys]
    with tf.GradientTape() as ref_tape:
        ref = tf.nn.safe_embedding_lookup_sparse(
            dense, ragged(remap).to_sparse(), ragged(weights, tf.float32).to_sparse(), "mean"
        )
        ref_loss = tf.reduce_sum(ref * np.arange(9.0).reshape(3, 3).astype(np.float32))
    np.testing.assert_allclose(d_out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-7)
    grad = tape.gradient(loss, dynamic)
    ref_grad = tf.convert_to_tensor(ref_tape.gradient(ref_loss, dense)).numpy()
    assert isinstance(grad, tf.IndexedSlices)
    for key, value in zip(grad.indices.numpy().tolist(), grad.values.numpy()):
        np.testing.assert_allclose(value, ref_grad[order.index(key)], rtol=1e-5, atol=1e-7)
    assert s_out.shape == (3, 3)


def test_same_initial_row_for_a_key_whatever_the_order():
    init = keras.initializers.TruncatedNormal(seed=8)
    a, b = sok.DynamicVariable(4, initializer=init), sok.DynamicVariable(4, initializer=init)
    sok.lookup_sparse(a, ragged([[1, 2, 3]]))
    sok.lookup_sparse(b, ragged([[3], [9]]))
    sok.lookup_sparse(b, ragged([[2, 1]]))
    ra, rb = rows_by_key(a), rows_by_key(b)
    for key in (1, 2, 3):
        np.testing.assert_array_equal(ra[key], rb[key])


@pytest.mark.parametrize(
    "dtype, dim", [(tf.float32, 8), (tf.bfloat16, 8), (tf.float32, 7), (tf.float32, 3)]
)
def test_a_large_batch_of_new_keys_gets_their_initial_rows(dtype, dim):
    # 20,000 new keys in one lookup: their initial values are written on all threads, after the
    # serial index inserts; a table that meets the same keys a few at a time writes them serially.
    # Normal values come four columns at a time where the CPU can (vector log and cos), then
    # one by one: dims 8, 7 and 3 take both ways, one of them or the other.
    init = keras.initializers.RandomNormal(seed=5)
    rng = np.random.default_rng(6)
    keys = rng.permutation(np.unique(rng.integers(-(2**40), 2**40, 20_000)))
    many = sok.DynamicVariable(dim, initializer=init, dtype=dtype)
    few = sok.DynamicVariable(dim, initializer=init, dtype=dtype)
    out = sok.lookup_sparse(many, tf.RaggedTensor.from_tensor(keys.reshape(-1, 1)))
    for part in np.array_split(keys[:600], 200):
        sok.lookup_sparse(few, tf.RaggedTensor.from_tensor(part.reshape(-1, 1)))
    many_rows, few_rows = rows_by_key(many), rows_by_key(few)
    assert len(many_rows) == len(keys) > 19_000
    for i, key in enumerate(keys[:600].tolist()):
        np.testing.assert_array_equal(many_rows[key], few_rows[key])
        np.testing.assert_array_equal(out[i].numpy(), np.asarray(many_rows[key], np.float32))
    # Every row against the initializer in TF's own ops (its log and cos may differ by an ulp).
    expected = initial_rows(many.initializer_spec, tf.constant(keys), dim).numpy()
    got = np.stack([np.asarray(many_rows[k], np.float32) for k in keys.tolist()])
    rtol = 1e-6 if dtype == tf.float32 else 2**-8
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=1e-7)


@pytest.mark.parametrize(
    "make", [lambda: keras.optimizers.Adam(0.05), lambda: keras.optimizers.Adagrad(0.1)]
)
def test_optimizer_equals_lazy_reference(make, device):
    table = sok.DynamicVariable(4, initializer=keras.initializers.RandomNormal(seed=2))
    opt = make()
    name = "adam" if isinstance(opt, keras.optimizers.Adam) else "adagrad"
    rng = np.random.default_rng(3)
    universe = [-(2**62), -3, 0, 11, 2**33]
    sok.lookup_sparse(table, ragged([universe]))
    init = rows_by_key(table)
    w = np.stack([init[k] for k in universe])
    ref = LazyOptimizer(name, opt.get_config(), w.shape)

    @tf.function
    def step(keys, grads):
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(tf.IndexedSlices(grads, keys), table)])

    for _ in range(5):
        idx = np.sort(rng.choice(len(universe), size=3, replace=False))
        g = rng.standard_normal([3, 4]).astype(np.float32)
        step(tf.constant([universe[i] for i in idx], tf.int64), tf.constant(g))
        ref.step(w, idx, g, float(opt.learning_rate))
    got = rows_by_key(table)
    np.testing.assert_allclose(np.stack([got[k] for k in universe]), w, rtol=2e-5, atol=1e-6)
    keys, full = table.export(with_slots=True)
    assert full.shape == (5, 4 * (3 if name == "adam" else 2))


@pytest.mark.parametrize("name", ["adam", "rmsprop"])
def test_optimizer_on_many_keys_equals_lazy_reference(name):
    """Thousands of keys per step: the rows are updated in parallel chunks."""
    opt = (
        keras.optimizers.Adam(0.01)
        if name == "adam"
        else keras.optimizers.RMSprop(0.01, momentum=0.5, centered=True)
    )
    table = sok.DynamicVariable(8, initializer=keras.initializers.RandomNormal(seed=4))
    rng = np.random.default_rng(5)
    universe = np.unique(rng.integers(-(2**62), 2**62, size=6000))
    sok.lookup_sparse(table, tf.RaggedTensor.from_tensor(universe.reshape(-1, 1)))
    init = rows_by_key(table)
    w = np.stack([init[k] for k in universe])
    ref = LazyOptimizer(name, opt.get_config(), w.shape)
    for _ in range(3):
        idx = np.sort(rng.choice(len(universe), size=4000, replace=False))
        g = rng.standard_normal([4000, 8]).astype(np.float32)
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(tf.IndexedSlices(tf.constant(g), universe[idx]), table)])
        ref.step(w, idx, g, float(opt.learning_rate))
    got = rows_by_key(table)
    np.testing.assert_allclose(np.stack([got[k] for k in universe]), w, rtol=2e-5, atol=1e-6)


def test_admission_min_count():
    table = sok.DynamicVariable(2, initializer="ones", min_count=3)
    opt = keras.optimizers.SGD(1.0)
    for lookup in range(1, 5):
        with tf.GradientTape() as tape:
            out = sok.lookup_sparse(table, ragged([[42]]))
            loss = tf.reduce_sum(out)
        # Stored (and trained by the step below) from the 3rd lookup on.
        np.testing.assert_array_equal(out.numpy(), [[1.0 - (lookup == 4), 1.0 - (lookup == 4)]])
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(tape.gradient(loss, table), table)])
        assert int(table.size()) == (1 if lookup >= 3 else 0), lookup


@pytest.mark.parametrize("policy,expected", [("lru", [2, 4, 5]), ("lfu", [1, 2, 5])])
def test_capacity_evicts_by_policy(policy, expected):
    table = sok.DynamicVariable(2, capacity=3, evict_policy=policy)
    for key in [1, 1, 1, 2, 2, 3, 4, 2, 5]:  # one key per lookup step
        sok.lookup_sparse(table, ragged([[key]]))
    # lru: 4 evicts 1 (seen last at step 3), 5 evicts 3 (step 6).
    # lfu: 4 evicts 3 (1 lookup), 5 evicts 4 (1 lookup; 1 and 2 have 3).
    assert sorted(rows_by_key(table)) == expected


def test_rows_of_the_batch_are_not_evicted_for_its_new_keys():
    table = sok.DynamicVariable(2, capacity=3, evict_policy="lru")
    for key in (1, 2, 3):
        sok.lookup_sparse(table, ragged([[key]]))
    # Key 1 is the least recently used row, but this batch sees it (twice): the room for key 4
    # comes from evicting 2.
    sok.lookup_sparse(table, ragged([[3], [1], [3, 4], [1]]))
    assert sorted(rows_by_key(table)) == [1, 3, 4]


def test_gradient_sums_the_repeats_of_a_key():
    table = sok.DynamicVariable(3, initializer="zeros")
    with tf.GradientTape() as tape:
        out = sok.lookup_sparse(table, ragged([[5, 5, -(2**63)], [5]]))
        loss = tf.reduce_sum(out * tf.constant([[1.0], [10.0]]))
    grad = tape.gradient(loss, table)
    assert isinstance(grad, tf.IndexedSlices)
    assert grad.indices.numpy().tolist() == [5, -(2**63)]  # one row per key, first seen first
    np.testing.assert_array_equal(grad.values.numpy(), [[12.0] * 3, [1.0] * 3])


def test_update_sums_repeated_keys_and_skips_keys_not_stored():
    table = sok.DynamicVariable(2, initializer="zeros")
    sok.lookup_sparse(table, ragged([[3, 4]]))
    grads = tf.constant([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0], [5.0, 5.0]])
    keys = tf.constant([3, 9, 3, 4], tf.int64)  # 9 was never looked up
    with sok.OptimizerScope([table]):
        keras.optimizers.SGD(1.0).apply_gradients([(tf.IndexedSlices(grads, keys), table)])
    rows = rows_by_key(table)
    assert sorted(rows) == [3, 4]
    np.testing.assert_array_equal(rows[3], [-101.0, -202.0])
    np.testing.assert_array_equal(rows[4], [-5.0, -5.0])


def test_capacity_too_small_for_one_lookup():
    table = sok.DynamicVariable(2, capacity=2, name="tiny")
    with pytest.raises(tf.errors.InvalidArgumentError, match="'tiny'.*capacity 2 is too small"):
        sok.lookup_sparse(table, ragged([[1, 2, 3]]))


def test_memory_follows_seen_keys():
    """A feature with 3 distinct values declared over 100,000 categories stores 3 rows."""
    table = sok.DynamicVariable(8, name="country")
    opt = keras.optimizers.Adam(0.01)
    rng = np.random.default_rng(4)
    for _ in range(20):
        ids = rng.choice([17, 99_999, 523], size=[32, 1])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(sok.lookup_sparse(table, tf.RaggedTensor.from_tensor(ids)))
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(tape.gradient(loss, table), table)])
    assert sorted(rows_by_key(table)) == [17, 523, 99_999]


def test_int32_keys():
    table = sok.DynamicVariable(2, key_dtype=tf.int32, initializer="zeros")
    sok.lookup_sparse(table, ragged([[-(2**31), 2**31 - 1]], tf.int32))
    keys, _ = table.export()
    assert keys.dtype == tf.int32 and sorted(keys.numpy().tolist()) == [-(2**31), 2**31 - 1]
    with pytest.raises(ValueError, match="keys must be int32"):
        sok.lookup_sparse(table, ragged([[1]], tf.int64))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"dimension": 0}, "positive int"),
        ({"dimension": 4, "key_dtype": tf.float32}, "key_dtype"),
        ({"dimension": 4, "dtype": tf.float64}, "float32, bfloat16 or float16 rows"),
        ({"dimension": 4, "initializer": keras.initializers.Orthogonal()}, "per key"),
        ({"dimension": 4, "capacity": 0}, "capacity"),
        ({"dimension": 4, "evict_policy": "fifo"}, "evict_policy"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sok.DynamicVariable(**kwargs)


def test_bad_assign_and_reads():
    table = sok.DynamicVariable(3, name="t")
    with pytest.raises(ValueError, match="width 2 for dimension 3"):
        table.assign([1], np.zeros([1, 2]))
    with pytest.raises(ValueError, match="keys of dtype float32"):
        table.assign(tf.constant([1.0]), np.zeros([1, 3]))
    with pytest.raises(ValueError, match="DynamicVariable"):
        table.numpy()
    with pytest.raises(ValueError, match="ids must be int32 or int64"):
        sok.lookup_sparse(table, ragged([[1.5]], tf.float32))


def test_assigned_new_keys_get_the_values_given_and_their_slots_fills():
    # A new key's assigned value is written over no initial value; its slots still start at the
    # optimizer's fills (Adagrad: initial_accumulator_value).
    table = sok.DynamicVariable(4, initializer=keras.initializers.RandomNormal(seed=3))
    opt = keras.optimizers.Adagrad(0.1, initial_accumulator_value=0.25)
    sok.lookup_sparse(table, ragged([[7]]))
    with sok.OptimizerScope([table]):
        grad = tf.IndexedSlices(tf.ones([1, 4]), tf.constant([7], tf.int64))
        opt.apply_gradients([(grad, table)])
    keys = [7] + [2**50 + k for k in range(3000)]  # rows past the first chunk of 1,024 too
    values = np.random.default_rng(4).standard_normal([len(keys), 4]).astype(np.float32)
    table.assign(tf.constant(keys, tf.int64), values)
    rows = rows_by_key(table, with_slots=True)
    got = np.stack([rows[k] for k in keys])
    np.testing.assert_array_equal(got[:, :4], values)
    np.testing.assert_array_equal(got[1:, 4:], np.full([len(keys) - 1, 4], 0.25, np.float32))
    assert np.all(got[0, 4:] > 0.25)  # an existing key keeps its slot


def test_rejected_assign_leaves_the_table_unchanged():
    table = sok.DynamicVariable(3, initializer="zeros")
    with pytest.raises(tf.errors.InvalidArgumentError):
        table.assign([1], np.zeros([2, 6]), with_slots=True)  # two rows for one key
    assert int(table.size()) == 0
    _, full = table.export(with_slots=True)
    assert full.shape[1] == 3  # no slots were laid out
    with sok.OptimizerScope([table]):  # so a one-slot optimizer still fits
        keras.optimizers.SGD(0.1, momentum=0.9).apply_gradients(
            [(tf.IndexedSlices(tf.ones([1, 3]), tf.constant([5], tf.int64)), table)]
        )


@pytest.mark.parametrize("in_function", [False, True])
@pytest.mark.parametrize(
    "keys, rows",
    [
        ([5, 6, 7], np.zeros([2, 4], np.float32)),  # fewer rows than keys
        ([5, 6], np.zeros([2, 5], np.float32)),  # not a whole number of 4-column arrays
    ],
)
def test_replace_rows_refuses_bad_rows_and_keeps_the_table(keys, rows, in_function):
    table = sok.DynamicVariable(4, name="kept")
    sok.lookup_sparse(table, tf.ragged.constant([[1, 2, 3]], dtype=tf.int64))
    before_keys, before_rows = table.export(with_slots=True)

    def replace():
        table.replace_rows(tf.constant(keys, tf.int64), tf.constant(rows))

    with pytest.raises(tf.errors.InvalidArgumentError, match="kept"):
        tf.function(replace)() if in_function else replace()
    after_keys, after_rows = table.export(with_slots=True)
    np.testing.assert_array_equal(np.sort(after_keys.numpy()), np.sort(before_keys.numpy()))
    assert after_rows.shape == before_rows.shape
