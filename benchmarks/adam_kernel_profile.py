"""One row-wise Adam variant stepped in a loop, to profile its kernel under perf.

On a shared machine the wall time of a step mostly measures waiting for a core; the cycles
the process spends in the optimizer kernel do not. Run one variant per process:

    perf record -e cycles -c 1000000 -o f32.data python adam_kernel_profile.py f32 400
    perf report -i f32.data --sort symbol | grep -E "ApplyRows|ApplyHalfRows|Fast|WidenHalf"

Variants: f32 (float32 table and slots), bf16 (bfloat16 table, float32 slots), bf16s
(bfloat16 table and slots). 2,000,000 x 64, 4,096 touched rows per step, as half_bench.py.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import sok_lite as sok  # noqa: E402

VARIANTS = {
    "f32": {},
    "bf16": {"dtype": "bfloat16"},
    "bf16s": {"dtype": "bfloat16", "slot_dtype": "bfloat16"},
}


def main():
    variant, steps = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(0)
    shape = [2_000_000, 64]
    table = sok.Variable(shape=shape, initializer="zeros", name="adam", **VARIANTS[variant])
    opt = keras.optimizers.Adam(0.001)
    grads = []
    for _ in range(8):
        idx = np.sort(rng.choice(shape[0], size=4096, replace=False))
        values = rng.standard_normal([4096, 64]).astype(np.float32)
        grads.append((tf.constant(idx, tf.int64), tf.constant(values)))

    @tf.function
    def step(idx, values):
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(tf.IndexedSlices(values, idx, shape), table)])
        return opt.iterations

    for i in range(steps):
        step(*grads[i % len(grads)]).numpy()


if __name__ == "__main__":
    main()
