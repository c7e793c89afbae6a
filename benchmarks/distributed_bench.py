"""Distributed lookup step time vs table size, and bytes on the wire, under Horovod.

Run: horovodrun -np 2 -H localhost:2 --gloo python benchmarks/distributed_bench.py

Per table size (d = 64): ours = sharded table, fused lookup fwd + bwd + a lazy SGD row update;
peer = the plain data-parallel way (a replicated tf.Variable, tf.nn.embedding_lookup_sparse, the
gradient densified and all-reduced with Horovod, then applied), run only while the dense gradient
is small enough to be worth timing. Rank 0 prints the table.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import time_steps, zipf_ids  # noqa: E402

import sok_lite as sok  # noqa: E402


def batch_ids(rank, batch, hotness, rows):
    rng = np.random.default_rng(100 + rank)
    return zipf_ids(rng, batch * hotness, rows).reshape(batch, hotness)


def wire_bytes(rows, n, batch, hotness, dim):
    """Bytes each rank sends per step through our two all-to-alls (forward + backward)."""
    uniques = [np.unique(batch_ids(r, batch, hotness, rows)) for r in range(n)]
    me = hvd.rank()
    ids_sent = 8 * (n + len(uniques[me]))  # per-destination table counts + the ids
    asked_of_me = sum(int(np.sum(u % n == me)) for u in uniques)
    vectors_fwd = 4 * dim * asked_of_me  # rows answered to the requesters
    vectors_bwd = 4 * dim * len(uniques[me])  # gradients of my unique ids back to owners
    return ids_sent + vectors_fwd + vectors_bwd


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="100000,1000000,10000000")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=8192, help="samples per rank")
    p.add_argument("--hotness", type=int, default=10)
    p.add_argument("--peer-max-rows", type=int, default=1_000_000)
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args()
    hvd.init()
    sok.init("horovod")
    n, rank = hvd.size(), hvd.rank()
    # Share the cores among the ranks of this host instead of oversubscribing them.
    threads = max(1, (os.cpu_count() or 1) // hvd.local_size())
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    results = []
    for rows in [int(s) for s in args.sizes.split(",")]:
        ids = batch_ids(rank, args.batch, args.hotness, rows)
        sp = tf.RaggedTensor.from_tensor(tf.constant(ids, tf.int64))
        table = sok.Variable(shape=[rows, args.dim], initializer="random_uniform")

        @tf.function
        def our_step(table=table, sp=sp):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(sok.lookup_sparse(table, sp))
            g = tape.gradient(loss, table)
            table.scatter_sub(tf.IndexedSlices(0.01 * g.values, g.indices))
            return loss

        # Timed apart from the peer: its 100+ MB all-reduces would evict our rows from cache.
        times = time_steps([lambda s=our_step: s().numpy()], warmup=3, iters=args.iters)
        peer_bytes = 2 * (n - 1) / n * 4 * rows * args.dim  # ring all-reduce of the dense gradient
        if rows <= args.peer_max_rows:
            dense = tf.Variable(tf.zeros([rows, args.dim]))
            sp_sparse = sp.to_sparse()

            @tf.function
            def peer_step(dense=dense, sp_sparse=sp_sparse):
                with tf.GradientTape() as tape:
                    out = tf.nn.embedding_lookup_sparse(dense, sp_sparse, None, combiner="sum")
                    loss = tf.reduce_sum(out)
                g = hvd.allreduce(tf.convert_to_tensor(tape.gradient(loss, dense)), op=hvd.Sum)
                dense.assign_sub(0.01 * g)
                return loss

            times += time_steps([lambda s=peer_step: s().numpy()], warmup=3, iters=args.iters)
        times = [float(hvd.allreduce(tf.constant(t), op=hvd.Max)) for t in times]  # slowest rank
        results.append(
            (rows, times, wire_bytes(rows, n, args.batch, args.hotness, args.dim), peer_bytes)
        )
        del table
    if rank == 0:
        print(
            f"distributed lookup, {n} ranks, batch {args.batch:,} x {args.hotness} Zipf(1.2) ids "
            f"per rank, d = {args.dim}, fwd + bwd + sparse SGD update"
        )
        print(
            f"{'rows':>12} {'sok_lite ms':>12} {'peer ms':>10} {'ratio':>7} "
            f"{'our bytes/rank':>15} {'dense all-reduce bytes/rank':>28}"
        )
        for rows, times, ours, peer in results:
            peer_ms = f"{times[1]:10.1f}" if len(times) > 1 else f"{'not run':>10}"
            ratio = f"{times[1] / times[0]:6.1f}x" if len(times) > 1 else f"{'':>7}"
            print(
                f"{rows:>12,} {times[0]:12.2f} {peer_ms} {ratio} {ours / 1e6:12.2f} MB "
                f"{peer / 1e6:25.1f} MB"
            )
        flat = max(r[1][0] for r in results) / min(r[1][0] for r in results)
        print(f"step time, largest / smallest table: {flat:.2f}")


if __name__ == "__main__":
    main()
