"""16-bit hash tables (DynamicVariable) against float32 ones, side by side in one process.

Both tables hold the same keys and (rounded) values. lookup_sparse forward + backward (one rank
on the CPU: the fused find-and-combine op) on --keys stored keys, --batch x --hotness Zipf ids;
one row-wise Adam step with --touched keys; then the bytes of a stored record (value + Adam's
two float32 slots) from the exported widths.

Usage: python benchmarks/half_dynamic_bench.py [--dtype bfloat16|float16] [--iters 10]
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import cycling, time_blocks, zipf_ids  # noqa: E402
from half_bench import lookup_step  # noqa: E402

import sok_lite as sok  # noqa: E402


def adam_step(table, grads):
    opt = keras.optimizers.Adam(0.001)

    @tf.function
    def step(keys, values):
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(tf.IndexedSlices(values, keys), table)])
        return opt.iterations

    return cycling(step, grads)


def print_pair(title, dtype, ms_half, ms_full):
    print(title)
    print(f"  {'float32 hash table':<28s} {ms_full:8.2f} ms/step")
    print(f"  {dtype + ' hash table':<28s} {ms_half:8.2f} ms/step")
    print(f"  ratio {dtype} / float32: {ms_half / ms_full:.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    p.add_argument("--keys", type=int, default=500_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=16_384)
    p.add_argument("--hotness", type=int, default=10)
    p.add_argument("--touched", type=int, default=4096)
    p.add_argument("--iters", type=int, default=10)
    args = p.parse_args()
    rng = np.random.default_rng(0)

    keys = rng.integers(-(2**62), 2**62, size=args.keys)
    half = sok.DynamicVariable(args.dim, dtype=args.dtype, name="bench_half")
    full = sok.DynamicVariable(args.dim, name="bench_f32")
    half.assign(keys, rng.standard_normal([args.keys, args.dim]).astype(np.float32))
    stored_keys, stored = half.export()
    full.assign(stored_keys, stored)  # the same values
    del stored

    ids = keys[zipf_ids(rng, args.batch * args.hotness, args.keys)]
    splits = np.arange(0, ids.size + 1, args.hotness, dtype=np.int64)
    sp_ids = tf.RaggedTensor.from_row_splits(tf.constant(ids, tf.int64), splits)
    steps = [lookup_step(half, sp_ids), lookup_step(full, sp_ids)]
    a, b = (s() for s in steps)  # the same numbers first: float32 math on the same values
    np.testing.assert_array_equal(a[0].numpy(), b[0].numpy())
    del a, b
    ms = time_blocks(steps, rounds=3, iters=args.iters)
    print_pair(
        f"lookup_sparse fwd + bwd: {args.keys:,} keys x {args.dim}, "
        f"{args.batch:,} x {args.hotness} Zipf ids",
        args.dtype,
        *ms,
    )

    grads = []
    for _ in range(8):
        touched = rng.choice(keys, size=args.touched, replace=False)
        values = rng.standard_normal([args.touched, args.dim]).astype(np.float32)
        grads.append((tf.constant(touched, tf.int64), tf.constant(values)))
    ms = time_blocks([adam_step(half, grads), adam_step(full, grads)], rounds=3, iters=args.iters)
    print_pair(
        f"row-wise Adam: {args.keys:,} keys x {args.dim}, {args.touched:,} touched keys",
        args.dtype,
        *ms,
    )
    # A record: the value (16-bit values packed two to a float) and Adam's two float32 slots.
    per_value = {"float32": 4, args.dtype: 2}
    for name in ("float32", args.dtype):
        record = args.dim * per_value[name] + 2 * args.dim * 4
        per_column = record / args.dim
        print(f"record bytes, {name} value + Adam slots: {record} ({per_column:.0f} / column)")


if __name__ == "__main__":
    main()
