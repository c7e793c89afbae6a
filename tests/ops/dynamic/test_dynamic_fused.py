"""One rank's hash-table lookup_sparse (SokLiteDynamicLookupCombine: find-or-create and combine
in one pass over ids that are not deduplicated) against NumPy and against the deduplicated ops.

Batches are large enough for the kernel to split the samples over threads, so a key repeats
within and across the threads' ranges.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.ops import hash_table_ops
from tests.common import rows_by_key

EXTREME_KEYS = [-(2**63), -1, 0, 2**31, 2**63 - 1]


def random_batch(rng, batch=6000):
    """Ragged Zipf keys (0 to 5 per sample, some empty samples) with a few extreme keys."""
    lengths = rng.integers(0, 6, batch)
    keys = (rng.zipf(1.3, lengths.sum()) - 1) % 5000 - 2500
    spots = rng.integers(0, keys.size, 20)
    keys[spots] = rng.choice(EXTREME_KEYS, spots.size)
    return keys.astype(np.int64), lengths


def numpy_combine(rows, keys, lengths, weights, combiner, dim):
    """rows: key -> [dim] values; per sample scale * sum_k w_k * rows[key_k], in float64."""
    out = np.zeros([lengths.size, dim])
    w = np.ones(keys.size) if weights is None else weights.astype(np.float64)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for b in range(lengths.size):
        k0, k1 = starts[b], starts[b + 1]
        if k0 == k1:
            continue
        total = sum(w[k] * rows[keys[k]].astype(np.float64) for k in range(k0, k1))
        denom = {"sum": 1.0, "mean": w[k0:k1].sum(), "sqrtn": np.sqrt((w[k0:k1] ** 2).sum())}
        out[b] = 0.0 if denom[combiner] == 0 else total / denom[combiner]
    return out


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("weighted", [False, True])
def test_fused_lookup_matches_numpy(combiner, weighted):
    rng = np.random.default_rng(7)
    dim = 8
    table = sok.DynamicVariable(dim, initializer=keras.initializers.RandomNormal(seed=3))
    seen = set()
    for _ in range(3):  # the first batch inserts every key; later ones mostly find them
        keys, lengths = random_batch(rng)
        weights = rng.uniform(0.5, 2.0, keys.size).astype(np.float32) if weighted else None
        ids = tf.RaggedTensor.from_row_lengths(keys, lengths)
        sp_weights = None if weights is None else tf.RaggedTensor.from_row_lengths(weights, lengths)
        out = sok.lookup_sparse(table, ids, sp_weights=sp_weights, combiners=combiner).numpy()
        seen |= set(keys.tolist())
        rows = rows_by_key(table)
        assert set(rows) == seen
        ref = numpy_combine(rows, keys, lengths, weights, combiner, dim)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_fused_rows_equal_the_deduplicated_ops_rows():
    """The same keys through SokLiteDynamicLookup (distinct keys, key order) and through the
    fused op give the same stored rows and the same combined output."""
    rng = np.random.default_rng(11)
    keys, lengths = random_batch(rng)
    init = keras.initializers.TruncatedNormal(stddev=0.3, seed=5)
    fused, plain = (
        sok.DynamicVariable(4, initializer=init),
        sok.DynamicVariable(4, initializer=init),
    )
    out = sok.lookup_sparse(fused, tf.RaggedTensor.from_row_lengths(keys, lengths)).numpy()
    unique = np.unique(keys)
    rows = hash_table_ops.lookup(plain.handle, tf.constant(unique), 4).numpy()
    np.testing.assert_array_equal(rows_by_key(fused)[int(unique[3])], rows[3])
    by_key = dict(zip(unique.tolist(), rows))
    ref = numpy_combine(by_key, keys, lengths, None, "sum", 4)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)
    assert int(fused.size()) == int(plain.size()) == unique.size


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_gradient_is_one_summed_row_per_distinct_key(combiner):
    rng = np.random.default_rng(3)
    dim = 5
    keys, lengths = random_batch(rng, batch=3000)
    weights = rng.uniform(0.5, 2.0, keys.size).astype(np.float32)
    upstream = rng.standard_normal([lengths.size, dim]).astype(np.float32)
    table = sok.DynamicVariable(dim, initializer="zeros")
    with tf.GradientTape() as tape:
        out = sok.lookup_sparse(
            table,
            tf.RaggedTensor.from_row_lengths(keys, lengths),
            sp_weights=tf.RaggedTensor.from_row_lengths(weights, lengths),
            combiners=combiner,
        )
        loss = tf.reduce_sum(out * upstream)
    grad = tape.gradient(loss, table)
    assert isinstance(grad, tf.IndexedSlices)
    got = grad.indices.numpy()
    _, first = np.unique(keys, return_index=True)
    np.testing.assert_array_equal(got, keys[np.sort(first)])  # distinct keys, first seen first
    expected = {k: np.zeros(dim) for k in got.tolist()}
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for b in range(lengths.size):
        w = weights[starts[b] : starts[b + 1]].astype(np.float64)
        denom = {"sum": 1.0, "mean": w.sum(), "sqrtn": np.sqrt((w**2).sum())}[combiner]
        for k in range(starts[b], starts[b + 1]):
            expected[keys[k]] += weights[k] / denom * upstream[b]
    np.testing.assert_allclose(
        grad.values.numpy(), np.stack([expected[k] for k in got.tolist()]), rtol=1e-4, atol=1e-5
    )


def test_lfu_counts_a_key_once_per_step_however_often_it_repeats():
    table = sok.DynamicVariable(2, capacity=3, evict_policy="lfu")
    # Two steps in which key 1 fills 50,000 samples, spread over the kernel's threads.
    for _ in range(2):
        sok.lookup_sparse(table, tf.RaggedTensor.from_tensor(tf.ones([50_000, 1], tf.int64)))
    for key in (2, 3, 2, 3, 2, 3):  # three steps each
        sok.lookup_sparse(table, tf.ragged.constant([[key]], tf.int64))
    sok.lookup_sparse(table, tf.ragged.constant([[4]], tf.int64))  # full: the least counted goes
    assert sorted(rows_by_key(table)) == [2, 3, 4]


def test_keys_of_a_large_batch_count_as_seen_in_its_step():
    table = sok.DynamicVariable(2)
    ids = np.concatenate([np.full(40_000, 1), [2], np.full(40_000, -(2**63))])
    sok.lookup_sparse(table, tf.RaggedTensor.from_tensor(ids.reshape(-1, 1)))
    sok.lookup_sparse(table, tf.ragged.constant([[3]], tf.int64))
    assert int(table.evict(steps_unseen=2)) == 0  # seen one step ago
    assert int(table.evict(steps_unseen=1)) == 3
    assert sorted(rows_by_key(table)) == [3]


def test_keys_not_admitted_read_their_initial_rows_inside_combined_samples():
    init = keras.initializers.RandomNormal(seed=9)
    gated, plain = (
        sok.DynamicVariable(3, initializer=init, min_count=2),
        sok.DynamicVariable(3, initializer=init),
    )
    ids = tf.ragged.constant([[7, 8, 7], [8], [], [9, 7]], tf.int64)
    w = tf.ragged.constant([[1.0, 2.0, 0.5], [3.0], [], [1.5, 1.0]])
    first = sok.lookup_sparse(gated, ids, sp_weights=w, combiners="mean").numpy()
    assert int(gated.size()) == 0  # each key seen in one step only
    expected = sok.lookup_sparse(plain, ids, sp_weights=w, combiners="mean").numpy()
    np.testing.assert_allclose(first, expected, rtol=1e-6)
    second = sok.lookup_sparse(gated, ids, sp_weights=w, combiners="mean").numpy()
    assert sorted(rows_by_key(gated)) == [7, 8, 9]
    np.testing.assert_allclose(second, expected, rtol=1e-6)


def test_hotness_and_malformed_splits_are_rejected():
    table = sok.DynamicVariable(2, name="clicks")
    with pytest.raises(tf.errors.InvalidArgumentError, match="clicks.*more than hotness 2"):
        sok.lookup_sparse(table, tf.ragged.constant([[1, 2, 3]], tf.int64), hotness=2)

    def raw(splits, weights):
        ids = tf.constant([1, 2], tf.int64)
        splits = tf.constant(splits, tf.int64)
        return hash_table_ops.lookup_combine(
            table.handle, ids, splits, weights, 2, "sum", 0, "clicks"
        )

    with pytest.raises(tf.errors.InvalidArgumentError, match="clicks.*row_splits"):
        raw([0, 3], tf.zeros([0]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="clicks.*3 weights for 2 ids"):
        raw([0, 2], tf.ones([3]))
    assert int(table.size()) == 0


# More keys than a small table's index holds in cache: an optimizer step that took its rows
# from its lookup rather than the index would do so from about this size.
MANY_KEYS = 2**14 + 1000


def lookup_gradient(table, ids):
    """The gradient of sum(lookup_sparse(table, ids)) over [n, 1] ids."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(
            sok.lookup_sparse(table, tf.RaggedTensor.from_tensor(ids.reshape(-1, 1)))
        )
    return tape.gradient(loss, table)


def test_an_update_after_its_rows_went_to_other_keys_leaves_those_rows_alone():
    # The table's rows are replaced between the lookup and the optimizer step (as a checkpoint
    # load does), other keys in the same row numbers: the step must find that its keys are gone.
    dim = 3
    table = sok.DynamicVariable(dim, initializer=keras.initializers.RandomNormal(seed=4))
    lookup_gradient(table, np.arange(-MANY_KEYS, 0, dtype=np.int64))
    first = np.arange(1, 3001, dtype=np.int64)  # several row chunks, over the threads
    grad = lookup_gradient(table, first)
    second = np.arange(10_000, 10_000 + MANY_KEYS + first.size, dtype=np.int64)
    values = np.random.default_rng(7).standard_normal([second.size, dim]).astype(np.float32)
    table.replace_rows(tf.constant(second), tf.constant(values))
    with sok.OptimizerScope([table]):
        keras.optimizers.SGD(1.0).apply_gradients([(grad, table)])
    keys, rows = table.export()
    order = np.argsort(keys.numpy())
    np.testing.assert_array_equal(keys.numpy()[order], second)
    np.testing.assert_array_equal(rows.numpy()[order], values)


@pytest.mark.parametrize("rows_freed", [False, True])
def test_an_update_of_keys_in_any_order_changes_each_keys_own_row(rows_freed):
    rng = np.random.default_rng(5)
    dim = 4
    table = sok.DynamicVariable(dim, initializer=keras.initializers.RandomNormal(seed=6))
    lookup_gradient(table, np.arange(-MANY_KEYS, 0, dtype=np.int64))
    ids = ((rng.zipf(1.2, 20_000) - 1) % 4000).astype(np.int64)
    distinct = lookup_gradient(table, ids).indices.numpy()  # first seen first
    if rows_freed:  # rows freed between the lookup and the step
        assert int(table.evict(steps_unseen=1)) == MANY_KEYS
    before = rows_by_key(table)
    # The lookup's order for a while, then the rest shuffled, and a key never stored.
    keys = np.concatenate([distinct[:500], rng.permutation(distinct[500:]), [99_999]])
    grads = rng.standard_normal([keys.size, dim]).astype(np.float32)
    with sok.OptimizerScope([table]):
        keras.optimizers.SGD(1.0).apply_gradients(
            [(tf.IndexedSlices(tf.constant(grads), tf.constant(keys)), table)]
        )
    after = rows_by_key(table)
    assert sorted(after) == sorted(before)
    for key, grad in zip(keys[:-1].tolist(), grads):
        np.testing.assert_allclose(after[key], before[key] - grad, rtol=1e-6, atol=1e-6)
    for key in set(before) - set(keys.tolist()):
        np.testing.assert_array_equal(after[key], before[key])
