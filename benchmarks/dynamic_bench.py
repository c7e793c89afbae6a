"""DynamicVariable: memory per stored row, and find-or-insert + gather speed vs TF's hash table.

Usage: python benchmarks/dynamic_bench.py [--keys 1000000] [--dim 64] [--new-keys 16384]

Memory: process RSS growth while 10^6 distinct keys are inserted into a table that already has
Adam's two slots, against the raw payload (value + 2 slots, float32).
Speed: 163,840 Zipf(1.2) ids (~29k unique), d = 64, inside tf.function: ours through
lookup_sparse (one id per sample: a gather) on the ids as a dense [163840, 1] tensor, and again
as a RaggedTensor; TF's through tf.lookup.experimental.DenseHashTable (unique, lookup, insert
the missing keys with initial values, gather) on the same ids as a dense [163840] tensor.
Timed in blocks (each side's steps back to back) and interleaved (each call after the other
side's); see time_blocks and time_steps in common.py.
Training step: the same ids, a loss through a fixed projection, its gradient and an Adam update
of the rows read: ours through lookup_sparse + OptimizerScope(keras Adam), TF's with three
DenseHashTables (rows, m, v) and Adam's update written out.
New keys: --new-keys ids a step that were never seen (uniform over 2^62), so every id inserts a
row with its initial values; the same find-or-insert + gather on both sides, interleaved.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import cycling, report, time_blocks, time_steps, zipf_ids  # noqa: E402

import sok_lite as sok  # noqa: E402


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory(num_keys, dim):
    table = sok.DynamicVariable(dim, initializer=keras.initializers.RandomNormal(seed=1))
    opt = keras.optimizers.Adam(0.001)
    with sok.OptimizerScope([table]):  # creates the in-table slots (m, v) up front
        opt.apply_gradients(
            [(tf.IndexedSlices(tf.zeros([1, dim]), tf.constant([-1], tf.int64)), table)]
        )
    lookup = tf.function(lambda ids: sok.lookup_sparse(table, ids))
    batch = 100_000
    chunks = [
        tf.RaggedTensor.from_tensor(tf.reshape(tf.range(s, s + batch, dtype=tf.int64), [-1, 1]))
        for s in range(0, num_keys, batch)
    ]
    lookup(chunks[0][:1])
    before = rss_bytes()
    for c in chunks:
        lookup(c)
    grown = rss_bytes() - before
    payload = num_keys * dim * 4 * 3
    print(
        f"memory: {num_keys:,} keys, d = {dim}, value + Adam m, v: RSS grew {grown / 2**20:.1f} "
        f"MiB for {payload / 2**20:.1f} MiB of payload: {grown / payload:.2f}x "
        f"({grown / num_keys:.0f} bytes per row)"
    )


def dense_hash_table_step(dim):
    """The peer: a tf.function over a new DenseHashTable that finds ids (unique, lookup), inserts
    the missing ones with random normal rows, and gathers a row per id."""
    tf_table = tf.lookup.experimental.DenseHashTable(
        key_dtype=tf.int64,
        value_dtype=tf.float32,
        default_value=tf.fill([dim], np.nan),
        empty_key=-(2**63),
        deleted_key=-(2**63) + 1,
    )

    @tf.function
    def tf_step(ids):
        unique, idx = tf.unique(ids)
        values = tf_table.lookup(unique)
        values = tf.reshape(values, [-1, dim])
        missing = tf.math.is_nan(values[:, 0])
        new_keys = tf.boolean_mask(unique, missing)
        init = tf.random.stateless_normal([tf.size(new_keys), dim], [1, 2], stddev=0.05)
        tf_table.insert(new_keys, init)
        values = tf.tensor_scatter_nd_update(values, tf.where(missing), init)
        return tf.gather(values, idx)

    return tf_step


def new_keys_speed(dim, iters, batch):
    """Every step's ids are keys never seen before: the cost of admitting rows, initial values
    included (ours: the initializer's normal rows; TF's: stateless_normal)."""
    rng = np.random.default_rng(1)
    warmup = 5
    fresh = [rng.integers(0, 2**62, batch) for _ in range(warmup + iters + 1)]
    table = sok.DynamicVariable(dim, initializer=keras.initializers.RandomNormal(seed=2))
    our_step = tf.function(lambda ids: sok.lookup_sparse(table, ids))
    tf_step = dense_hash_table_step(dim)
    ours = cycling(our_step, [(tf.constant(b.reshape(-1, 1)),) for b in fresh])
    peer = cycling(tf_step, [(tf.constant(b),) for b in fresh])
    ours(), peer()  # trace both on the first batch; the timed calls take the rest
    ours_ms, tf_ms = time_steps([ours, peer], warmup=warmup, iters=iters)
    report(
        f"hash-table insert + gather: {batch:,} new keys a step, d = {dim}, interleaved",
        ours_ms,
        tf_ms,
        "tf.lookup.experimental.DenseHashTable",
    )


def speed(dim, iters):
    rng = np.random.default_rng(0)
    batches = [zipf_ids(rng, 163_840, 2**40) for _ in range(4)]
    n_unique = int(np.mean([len(np.unique(b)) for b in batches]))
    table = sok.DynamicVariable(dim, initializer=keras.initializers.RandomNormal(seed=2))
    columns = [tf.constant(b.reshape(-1, 1)) for b in batches]
    ragged = [tf.RaggedTensor.from_tensor(c) for c in columns]
    our_step = tf.function(lambda ids: sok.lookup_sparse(table, ids))

    tf_step = dense_hash_table_step(dim)
    dense = [tf.constant(b) for b in batches]

    # An eager call of a tf.function on CPU returns once its outputs are computed; fetching
    # the 42 MB result to NumPy would add the same copy to both sides.
    ours = cycling(our_step, [(x,) for x in columns])
    ours_ragged = cycling(our_step, [(x,) for x in ragged])
    peer = cycling(tf_step, [(x,) for x in dense])
    title = f"163,840 Zipf(1.2) ids (~{n_unique:,} unique), d = {dim}"
    peer_name = "tf.lookup.experimental.DenseHashTable"
    # Two methods. Blocks: each side runs its own steps back to back, as a training loop does.
    # Interleaved: each call follows a call of the other side, whose step evicts the caches
    # (ours most: TF's step writes its 42 MB output through the cache). Each of our variants
    # alternates with the peer's step alone, not with the other variant.
    ours_ms, tf_ms = time_blocks([ours, peer], iters=iters)
    report(
        f"hash-table find-or-insert + gather: {title}, dense ids, blocks", ours_ms, tf_ms, peer_name
    )
    ours_ms, tf_ms = time_steps([ours, peer], iters=iters)
    report("the same, interleaved", ours_ms, tf_ms, peer_name)
    ragged_ms, tf_ms = time_steps([ours_ragged, peer], iters=iters)
    report("the same, interleaved, our ids as a RaggedTensor", ragged_ms, tf_ms, peer_name)


def train_speed(dim, iters):
    """One training step: lookup, a loss, its gradient, Adam on the rows that were read."""
    rng = np.random.default_rng(1)
    batches = [zipf_ids(rng, 163_840, 2**40) for _ in range(4)]
    proj = tf.constant(rng.standard_normal([dim, 1]).astype(np.float32))
    lr, beta_1, beta_2, eps = 0.001, 0.9, 0.999, 1e-7

    table = sok.DynamicVariable(dim, initializer=keras.initializers.RandomNormal(seed=2))
    opt = keras.optimizers.Adam(lr, beta_1=beta_1, beta_2=beta_2, epsilon=eps)

    @tf.function
    def our_step(ids):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.matmul(sok.lookup_sparse(table, ids), proj))
        grad = tape.gradient(loss, table)
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(grad, table)])
        return loss

    # The peer: TF's hash table for the rows and one each for Adam's m and v, updated by hand
    # as Keras' Adam does (bias-corrected step size).
    def dense_table(default):
        return tf.lookup.experimental.DenseHashTable(
            key_dtype=tf.int64,
            value_dtype=tf.float32,
            default_value=tf.fill([dim], default),
            empty_key=-(2**63),
            deleted_key=-(2**63) + 1,
        )

    values, m_table, v_table = dense_table(np.nan), dense_table(0.0), dense_table(0.0)
    step_count = tf.Variable(0.0)

    @tf.function
    def tf_step(ids):
        unique, idx = tf.unique(ids)
        rows = tf.reshape(values.lookup(unique), [-1, dim])
        missing = tf.math.is_nan(rows[:, 0])
        init = tf.random.stateless_normal([tf.reduce_sum(tf.cast(missing, tf.int32)), dim], [1, 2])
        rows = tf.tensor_scatter_nd_update(rows, tf.where(missing), 0.05 * init)
        with tf.GradientTape() as tape:
            tape.watch(rows)
            loss = tf.reduce_sum(tf.matmul(tf.gather(rows, idx), proj))
        grad = tf.convert_to_tensor(tape.gradient(loss, rows))
        t = step_count.assign_add(1.0)
        m = tf.reshape(m_table.lookup(unique), [-1, dim])
        v = tf.reshape(v_table.lookup(unique), [-1, dim])
        m += (grad - m) * (1 - beta_1)
        v += (tf.square(grad) - v) * (1 - beta_2)
        lr_t = lr * tf.sqrt(1 - beta_2**t) / (1 - beta_1**t)
        values.insert(unique, rows - lr_t * m / (tf.sqrt(v) + eps))
        m_table.insert(unique, m)
        v_table.insert(unique, v)
        return loss

    ragged = [tf.RaggedTensor.from_tensor(tf.constant(b.reshape(-1, 1))) for b in batches]
    dense = [tf.constant(b) for b in batches]
    ours = cycling(our_step, [(x,) for x in ragged])
    peer = cycling(tf_step, [(x,) for x in dense])
    ours_ms, tf_ms = time_steps([ours, peer], iters=iters)
    report(
        f"training step (lookup + gradient + Adam): the same ids, d = {dim}",
        ours_ms,
        tf_ms,
        "DenseHashTable x3 (rows, m, v) + Adam",
    )


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--new-keys", type=int, default=16_384, help="new keys a step (insert speed)")
    args = p.parse_args()
    speed(args.dim, args.iters)
    new_keys_speed(args.dim, args.iters, args.new_keys)
    train_speed(args.dim, args.iters)
    memory(args.keys, args.dim)


if __name__ == "__main__":
    main()
