"""16-bit tables against float32 tables, side by side in one process.

lookup_sparse forward + backward on a 1M x 64 table (16,384 x 10 Zipf ids), and one row-wise
Adam step (4,096 touched rows) on a 2M x 64 table, with float32 slots and with bfloat16 slots
(slot_dtype=tf.bfloat16); each prints the times and their ratios. Then the memory of table +
Adam slots. Timed blocks alternate between the variants (benchmarks/common.time_blocks).

Usage: python benchmarks/half_bench.py [--dtype bfloat16|float16|float32] [--iters 30]
                                       [--rounds 3] [--skip-lookup]
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import cycling, memory_setting, time_blocks, zipf_ids  # noqa: E402

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


def cpu_blocks(fns, rounds, iters):
    """Median CPU time (all threads of the process) per call in ms of each fn(), in blocks of
    `iters` calls alternating for `rounds` rounds as time_blocks does. On a machine shared with
    other jobs the wall time mostly measures waiting for a core; the CPU time of the step stays
    close to its quiet-machine wall time times the threads it keeps busy."""
    medians = [[] for _ in fns]
    for _ in range(rounds):
        for fn, m in zip(fns, medians):
            fn(), fn()  # warm up, as time_blocks does
            start = time.process_time()
            for _ in range(iters):
                fn()
            m.append((time.process_time() - start) * 1e3 / iters)
    return [float(np.median(m)) for m in medians]


def print_rows(title, rows):
    """rows: (label, wall ms, cpu ms) with float32 first; the speedups are float32's times
    over the row's."""
    print(title)
    _, wall_full, cpu_full = rows[0]
    for label, wall, cpu in rows:
        print(
            f"  {label:<34s} wall {wall:6.2f} ms/step ({wall_full / wall:.2f}x)  "
            f"cpu {cpu:6.2f} ms/step ({cpu_full / cpu:.2f}x)"
        )


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
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--skip-lookup", action="store_true", help="only the Adam step and memory")
    args = p.parse_args()
    print(memory_setting())
    rng = np.random.default_rng(0)
    if not args.skip_lookup:
        lookup_part(args, rng)
    adam_part(args, rng)


def lookup_part(args, rng):

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
    ms = time_blocks(steps, rounds=args.rounds, iters=args.iters)
    print_pair(
        f"lookup_sparse fwd + bwd: {args.lookup_rows:,} x {args.dim}, "
        f"{args.batch:,} x {args.hotness} Zipf ids",
        args.dtype,
        *ms,
    )


def adam_part(args, rng):
    grads = []
    for _ in range(8):
        idx = np.sort(rng.choice(args.adam_rows, size=args.touched, replace=False))
        values = rng.standard_normal([args.touched, args.dim]).astype(np.float32)
        grads.append((tf.constant(idx, tf.int64), tf.constant(values)))
    shape = [args.adam_rows, args.dim]
    half16 = args.dtype != "float32"  # bfloat16 slots need a 16-bit table
    tables = {
        "float32 table, float32 slots": sok.Variable(
            shape=shape, initializer="zeros", name="adam_f32"
        ),
    }
    if half16:
        tables[f"{args.dtype} table, float32 slots"] = sok.Variable(
            shape=shape, initializer="zeros", dtype=args.dtype, name="adam_half"
        )
        tables[f"{args.dtype} table, bfloat16 slots"] = sok.Variable(
            shape=shape,
            initializer="zeros",
            dtype=args.dtype,
            slot_dtype="bfloat16",
            name="adam_half_slots",
        )
    steps = {label: adam_step(table, grads) for label, table in tables.items()}
    fns = [s for s, _ in steps.values()]
    wall = time_blocks(fns, rounds=args.rounds, iters=args.iters)
    cpu = cpu_blocks(fns, rounds=args.rounds, iters=args.iters)
    print_rows(
        f"row-wise Adam: {args.adam_rows:,} x {args.dim}, {args.touched:,} touched rows "
        "(speed-up over float32 in brackets)",
        list(zip(steps, wall, cpu)),
    )

    def mib(label):
        table, opt = tables[label], steps[label][1]
        slots = sok.opt_slots(opt, table).values()
        return (table.numpy().nbytes + sum(s.numpy().nbytes for s in slots)) / 2**20

    print(f"memory, table + Adam slots ({args.adam_rows:,} x {args.dim}):")
    full_mib = mib(next(iter(tables)))
    for label in tables:
        print(f"  {label:<34s} {mib(label):8,.0f} MiB  ({mib(label) / full_mib:.2f})")


if __name__ == "__main__":
    main()
