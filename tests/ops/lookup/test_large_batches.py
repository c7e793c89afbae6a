"""Large batches: dedup of >10^5 ids with extreme int64 values, outputs large enough (32 MiB and
more) to be written with streaming stores, and hash-table lookups of many repeated keys."""

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.ops import hash_table_ops, lookup_ops
from tests.gpu.gpu_reference import unique_ids as first_occurrence_unique

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")


@pytest.mark.parametrize("seed", [0, 1])
def test_dedup_of_many_ids_matches_first_occurrence_order(seed):
    rng = np.random.default_rng(seed)
    n = 70_000 + seed * 50_000
    ids = (rng.zipf(1.2, n) - 1) % (2**62)
    ids[rng.integers(0, n, 500)] = rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64)
    ids[:3] = [-(2**63), 2**63 - 1, -1]
    splits = np.arange(n + 1, dtype=np.int64)
    unique, inverse = lookup_ops.unique_ids(
        [tf.constant(ids)], [tf.constant(splits)], [-1], [0], ["t"]
    )
    want_unique, want_inverse, _ = first_occurrence_unique(ids)
    np.testing.assert_array_equal(unique[0].numpy(), want_unique)
    np.testing.assert_array_equal(inverse[0].numpy(), want_inverse)


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_streamed_output_matches_tf(combiner):
    rng = np.random.default_rng(3)
    # 38 MB of output; with dim 68, most output rows start unaligned.
    rows, dim, batch = 5_000, 68, 140_000
    table = rng.standard_normal([rows, dim]).astype(np.float32)
    lengths = rng.choice([1, 1, 1, 2, 3], batch)
    values = rng.integers(0, rows, lengths.sum())
    weights = rng.uniform(0.5, 2.0, lengths.sum()).astype(np.float32)
    ids = tf.RaggedTensor.from_row_lengths(tf.constant(values, tf.int64), lengths)
    w = tf.RaggedTensor.from_row_lengths(tf.constant(weights), lengths)
    var = sok.Variable(table)
    ref = tf.Variable(table)
    for sp_weights in (None, w):
        ours = sok.lookup_sparse(var, ids, sp_weights, combiners=combiner)
        theirs = tf.nn.safe_embedding_lookup_sparse(
            ref,
            ids.to_sparse(),
            None if sp_weights is None else sp_weights.to_sparse(),
            combiner=combiner,
        )
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)


def test_dynamic_lookup_of_many_repeated_keys():
    rng = np.random.default_rng(4)
    keys = (rng.zipf(1.3, 100_000) - 1) * 7919 - 2**40
    table = sok.DynamicVariable(16, initializer="random_uniform")
    out = sok.lookup_sparse(table, tf.RaggedTensor.from_tensor(tf.constant(keys.reshape(-1, 1))))
    stored_keys, stored = (x.numpy() for x in table.export())
    assert len(stored_keys) == len(np.unique(keys)) == int(table.size())
    row_of = {k: i for i, k in enumerate(stored_keys)}
    np.testing.assert_array_equal(out.numpy(), stored[[row_of[k] for k in keys]])


def test_raw_lookup_counts_a_repeated_key_once_per_step():
    table = sok.DynamicVariable(4, min_count=2)
    keys = tf.constant([5, 5, 5, 9], tf.int64)
    first = hash_table_ops.lookup(table.handle, keys, 4)
    assert int(table.size()) == 0  # one step saw 5 once, however often it repeats
    second = hash_table_ops.lookup(table.handle, keys, 4)
    assert int(table.size()) == 2  # second step: both admitted, each stored once
    np.testing.assert_array_equal(first.numpy(), second.numpy())
    np.testing.assert_array_equal(second.numpy()[0], second.numpy()[2])
