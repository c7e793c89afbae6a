"""A training step (lookup_sparse + Adam) of a RAM DynamicVariable and of one with a disk tier
whose ram_budget is a quarter of the RAM table's bytes: ms per step and the tiered table's
memory_stats. Short: 25 timed steps after 5 warm-up steps, same ids for both.

Usage: python benchmarks/tiered_step_bench.py [--dim 64] [--pool 100000] [--batch 2048]
"""

import argparse
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import sok_lite as sok  # noqa: E402

STEPS, WARMUP = 25, 5


def ms_per_step(table, data) -> float:
    opt = keras.optimizers.Adam(0.01)

    @tf.function
    def step(ids):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(sok.lookup_sparse(table, ids)))
        grads = tape.gradient(loss, [table])
        with sok.OptimizerScope([table]):
            opt.apply_gradients(zip(grads, [table]))

    for ids in data[:WARMUP]:
        step(ids)
    start = time.perf_counter()
    for ids in data[WARMUP:]:
        step(ids)
    return (time.perf_counter() - start) / STEPS * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--pool", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=2048)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    data = [
        tf.RaggedTensor.from_tensor(
            tf.constant((rng.zipf(1.1, (args.batch, 4)) % args.pool).astype(np.int64))
        )
        for _ in range(WARMUP + STEPS)
    ]
    ram = sok.DynamicVariable(args.dim, name="ram")
    ms_ram = ms_per_step(ram, data)
    ram_bytes = ram.memory_stats()["bytes_ram"]
    disk = sok.storage.Disk(tempfile.mkdtemp(), ram_budget=ram_bytes // 4)
    tiered = sok.DynamicVariable(args.dim, name="tiered", storage=disk)
    ms_tiered = ms_per_step(tiered, data)
    print(f"rows {int(ram.size())}; RAM table {ram_bytes} bytes in RAM")
    print(f"RAM table: {ms_ram:.1f} ms/step")
    print(f"tiered, ram_budget {ram_bytes // 4}: {ms_tiered:.1f} ms/step")
    print(f"tiered memory_stats: {tiered.memory_stats()}")


if __name__ == "__main__":
    main()
