"""16-bit tables against float32 tables, side by side in one process.

lookup_sparse forward + backward on a 1M x 64 table (16,384 x 10 Zipf ids), and one row-wise
Adam step (4,096 touched rows) on a 2M x 64 table; each prints both times and their ratio. Then
the memory of table + Adam slots (float32 slots beside a 16-bit table).

Usage: python benchmarks/half_bench.py [--dtype bfloat16|float16|float32] [--iters 30]
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import cycling, time_blocks, zipf_ids  # noqa: E402

import sok_lite as sok  # noqa: E402


def lookup_step(table, sp_ids):
    @tf.function
    def step():
        with tf.GradientTape() as tape:
            out = sok.lookup_sparse(table, sp_ids)
            loss = tf.reduce_sum(out)
        g = tape.gradient(loss, table)
        return out, g.values, g.indices

    return step


def adam_step(table, grads):
    rows, dim = table.shape.as_list()
    opt = keras.optimizers.Adam(0.001)

    @tf.function
    def step(idx, values):
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(tf.IndexedSlices(values, idx, [rows, dim]), table)])
        return opt.iterations

    return cycling(step, grads), opt


def print_pair(title, dtype, ms_half, ms_full):
    print(title)
    print(f"  {'float32 table':<28s} {ms_full:8.2f} ms/step")
    print(f"  {dtype + ' table':<28s} {ms_half:8.2f} ms/step")
    print(f"  ratio {dtype} / float32: {ms_half / ms_full:.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--lookup-rows", type=int, default=1_000_000)
    p.add_argument("--adam-rows", type=int, default=2_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=16_384)
    p.add_argument("--hotness", type=int, default=10)
    p.add_argument("--touched", type=int, default=4096)
    p.add_argument("--iters", type=int, default=30)
    args = p.parse_args()
    rng = np.random.default_rng(0)

    init = rng.standard_normal([args.lookup_rows, args.dim]).astype(np.float32)
    ids = zipf_ids(rng, args.batch * args.hotness, args.lookup_rows)
    splits = np.arange(0, ids.size + 1, args.hotness, dtype=np.int64)
    sp_ids = tf.RaggedTensor.from_row_splits(tf.constant(ids, tf.int64), splits)
    half = sok.Variable(init, dtype=args.dtype, name="lookup_half")
    full = sok.Variable(tf.cast(half, tf.float32), name="lookup_f32")  # the same values
    steps = [lookup_step(half, sp_ids), lookup_step(full, sp_ids)]
    a, b = (s() for s in steps)  # the same numbers first: float32 math on the same values
    np.testing.assert_array_equal(a[0].numpy(), b[0].numpy())
    del a, b
    ms = time_blocks(steps, rounds=3, iters=args.iters)
    print_pair(
        f"lookup_sparse fwd + bwd: {args.lookup_rows:,} x {args.dim}, "
        f"{args.batch:,} x {args.hotness} Zipf ids",
        args.dtype,
        *ms,
    )
    del steps, full, half, init

    grads = []
    for _ in range(8):
        idx = np.sort(rng.choice(args.adam_rows, size=args.touched, replace=False))
        values = rng.standard_normal([args.touched, args.dim]).astype(np.float32)
        grads.append((tf.constant(idx, tf.int64), tf.constant(values)))
    shape = [args.adam_rows, args.dim]
    full = sok.Variable(shape=shape, initializer="zeros", name="adam_f32")
    half = sok.Variable(shape=shape, initializer="zeros", dtype=args.dtype, name="adam_half")
    (step_half, opt_half), (step_full, opt_full) = adam_step(half, grads), adam_step(full, grads)
    ms = time_blocks([step_half, step_full], rounds=3, iters=args.iters)
    print_pair(
        f"row-wise Adam: {args.adam_rows:,} x {args.dim}, {args.touched:,} touched rows",
        args.dtype,
        *ms,
    )

    def nbytes(table, opt):
        slots = sok.opt_slots(opt, table).values()
        return table.numpy().nbytes + sum(s.numpy().nbytes for s in slots)

    mib_full, mib_half = nbytes(full, opt_full) / 2**20, nbytes(half, opt_half) / 2**20
    print(
        f"memory, table + Adam slots ({args.adam_rows:,} x {args.dim}): float32 {mib_full:,.0f} "
        f"MiB, {args.dtype} table + float32 slots {mib_half:,.0f} MiB "
        f"({mib_half / mib_full:.2f})"
    )


if __name__ == "__main__":
    main()
