"""lookup_sparse vs tf.nn.embedding_lookup_sparse, forward + backward, single process.

Both run on the same table values and the same ids inside tf.function; each step returns the
outputs and the gradient (IndexedSlices values and indices) so that nothing is pruned, and the
time is the call's (the results stay tensors: no copy into NumPy is timed).

Usage: python benchmarks/lookup_bench.py [--rows 1000000] [--dim 64] [--batch 16384] [--hotness 10]
       [--no-peer]
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import memory_setting, report, time_steps, zipf_ids  # noqa: E402

import sok_lite as sok  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=16_384)
    p.add_argument("--hotness", type=int, default=10)
    p.add_argument("--combiner", default="sum")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument(
        "--no-peer", action="store_true", help="time our step alone (TF's is still checked)"
    )
    args = p.parse_args()
    print(memory_setting())

    rng = np.random.default_rng(0)
    init = rng.standard_normal([args.rows, args.dim]).astype(np.float32)
    ids = zipf_ids(rng, args.batch * args.hotness, args.rows).reshape(args.batch, args.hotness)
    sp_ids = tf.sparse.from_dense(tf.constant(ids + 1, tf.int64))  # +1: from_dense drops zeros
    sp_ids = tf.SparseTensor(sp_ids.indices, sp_ids.values - 1, sp_ids.dense_shape)
    n_unique = len(np.unique(ids))

    tf_table = tf.Variable(init)
    our_table = sok.Variable(init)

    @tf.function
    def tf_step():
        with tf.GradientTape() as tape:
            out = tf.nn.embedding_lookup_sparse(tf_table, sp_ids, None, combiner=args.combiner)
            loss = tf.reduce_sum(out)
        g = tape.gradient(loss, tf_table)
        return out, g.values, g.indices

    @tf.function
    def our_step():
        with tf.GradientTape() as tape:
            out = sok.lookup_sparse(our_table, sp_ids, combiners=args.combiner)
            loss = tf.reduce_sum(out)
        g = tape.gradient(loss, our_table)
        return out, g.values, g.indices

    # Same numbers first: a benchmark of a wrong result is worthless.
    a, b = tf_step(), our_step()
    np.testing.assert_allclose(a[0].numpy(), b[0].numpy(), rtol=1e-4, atol=1e-4)
    assert b[1].shape[0] == n_unique

    title = (
        f"lookup_sparse fwd+bwd: table {args.rows:,} x {args.dim}, batch {args.batch:,} x "
        f"{args.hotness} Zipf(1.2) ids ({n_unique:,} unique), combiner {args.combiner}, "
        f"{os.cpu_count()} cores"
    )
    if args.no_peer:
        (ours_ms,) = time_steps([our_step], iters=args.iters)
        print(f"{title}\n  {'sok_lite':<40s} {ours_ms:8.2f} ms/step")
        return
    # On the CPU a tf.function call returns once its ops have run, outputs included; copying the
    # results into NumPy arrays (11.5 MB a step) would time that copy on both sides as well.
    tf_ms, ours_ms = time_steps([tf_step, our_step], iters=args.iters)
    report(
        title,
        ours_ms,
        tf_ms,
        "tf.nn.embedding_lookup_sparse",
    )


if __name__ == "__main__":
    main()
