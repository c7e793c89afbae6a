"""A DynamicVariable (with a static table beside it) trained argv[2] Adam steps; each rank saves
its keys, rows and slots for the launching test (test_horovod_dynamic.py).

argv[3], optional: the tables' dtype. A 16-bit run sums integer-valued gradients without
dividing them, so that the float32 math (and so the rounding) cannot depend on the order in
which ranks add them."""

import sys

import horovod.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf

import sok_lite as sok
from tests.distributed.workers.report import Report

hvd.init()
sok.init("horovod")
RANK, N = hvd.rank(), hvd.size()
out_dir, steps = sys.argv[1], int(sys.argv[2])
DTYPE = sys.argv[3] if len(sys.argv) > 3 else "float32"
EXACT = DTYPE != "float32"
report = Report(out_dir, RANK)

hashed = sok.DynamicVariable(
    5, initializer=keras.initializers.RandomNormal(seed=6), name="hashed", dtype=DTYPE
)
static = sok.Variable(
    shape=[13, 2], initializer=keras.initializers.RandomNormal(seed=7), dtype=DTYPE
)
opt = keras.optimizers.Adam(0.05)
batch = 12
lo, hi = batch * RANK // N, batch * (RANK + 1) // N
KEYS = np.array([-(2**63), -1, 0, 7, 2**31, 2**40 + 3, 2**63 - 1, 123456789], np.int64)


@tf.function
def train_step(keys, ids, up):
    with tf.GradientTape() as tape:
        combiner = "sum" if EXACT else "mean"
        h, s = sok.lookup_sparse([hashed, static], [keys, ids], combiners=[combiner, "sum"])
        loss = (tf.reduce_sum(h * up) + tf.reduce_sum(s)) / (1 if EXACT else batch)
    grads = tape.gradient(loss, [hashed, static])
    with sok.OptimizerScope([hashed, static]):
        opt.apply_gradients(zip(grads, [hashed, static]))


for step in range(steps):
    rng = np.random.default_rng(step)
    keys = [
        KEYS[rng.integers(0, len(KEYS), size=k)].tolist() for k in rng.integers(0, 4, size=batch)
    ]
    ids = [rng.integers(0, 13, size=k).tolist() for k in rng.integers(1, 3, size=batch)]
    if EXACT:
        up = rng.integers(-3, 4, [batch, 5]).astype(np.float32)
    else:
        up = rng.standard_normal([batch, 5]).astype(np.float32)
    train_step(
        tf.ragged.constant(keys[lo:hi], dtype=tf.int64, ragged_rank=1, inner_shape=()),
        tf.ragged.constant(ids[lo:hi], dtype=tf.int64, ragged_rank=1, inner_shape=()),
        up[lo:hi],
    )

keys, rows = hashed.export(with_slots=steps > 0)
report.check(len(keys))
np.savez(
    f"{out_dir}/arrays{RANK}.npz",
    keys=keys.numpy(),
    rows=rows.numpy(),
    static=static.numpy().astype(np.float32),
    size=int(hashed.size()),
)
report.write(num_ranks=N)
