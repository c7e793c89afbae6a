"""Keras Adam on a large table with a few touched rows: plain Keras vs inside OptimizerScope.

Usage: python benchmarks/optimizer_bench.py [--rows 2000000] [--dim 64] [--touched 4096]
Then our step alone for tables of 10^5, 10^6 and 10^7 rows (flat: cost follows touched rows).
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import cycling, memory_setting, report, time_blocks, time_steps  # noqa: E402

import sok_lite as sok  # noqa: E402


def gradients(rows, dim, touched, n=8):
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        idx = np.sort(rng.choice(rows, size=touched, replace=False)).astype(np.int64)
        out.append((tf.constant(idx), tf.constant(rng.standard_normal([touched, dim]), tf.float32)))
    return out


def our_step_fn(rows, dim, touched):
    table = sok.Variable(shape=[rows, dim], initializer="zeros")
    opt = keras.optimizers.Adam(0.001)
    grads = gradients(rows, dim, touched)

    @tf.function
    def step(idx, values):
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(tf.IndexedSlices(values, idx, [rows, dim]), table)])
        return opt.iterations

    return cycling(step, grads)


def keras_step_fn(rows, dim, touched):
    var = tf.Variable(tf.zeros([rows, dim]))
    opt = keras.optimizers.Adam(0.001)
    grads = gradients(rows, dim, touched)

    @tf.function
    def step(idx, values):
        opt.apply_gradients([(tf.IndexedSlices(values, idx, [rows, dim]), var)])
        return opt.iterations

    return cycling(step, grads)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--touched", type=int, default=4096)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--sizes", default="100000,1000000,10000000")
    p.add_argument("--rounds", type=int, default=6, help="blocks of each table size")
    p.add_argument("--no-peer", action="store_true", help="only our step against table size")
    args = p.parse_args()
    print(memory_setting())
    if not args.no_peer:
        peer(args)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"our Adam step vs table size ({args.touched:,} touched rows, d = {args.dim}):")
    # Blocks of steps of each size alternate, so a change in the machine's load hits them alike.
    fns = [our_step_fn(rows, args.dim, args.touched) for rows in sizes]
    times = time_blocks(fns, rounds=args.rounds, iters=args.iters)
    for rows, ms in zip(sizes, times):
        print(f"  {rows:>12,} rows  {ms:8.2f} ms/step")
    print(f"  largest / smallest: {max(times) / min(times):.2f}")


def peer(args):
    ours_ms, keras_ms = time_steps(
        [
            our_step_fn(args.rows, args.dim, args.touched),
            keras_step_fn(args.rows, args.dim, args.touched),
        ],
        warmup=3,
        iters=args.iters,
    )
    report(
        f"Adam apply_gradients: table {args.rows:,} x {args.dim}, {args.touched:,} touched rows",
        ours_ms,
        keras_ms,
        "keras.optimizers.Adam (plain)",
    )


if __name__ == "__main__":
    main()
