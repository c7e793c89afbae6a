"""A DynamicVariable (with a static table beside it) trained 50 Adam steps; each rank saves its
keys, rows and slots for the launching test (test_horovod_dynamic.py)."""

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
report = Report(out_dir, RANK)

hashed = sok.DynamicVariable(5, initializer=keras.initializers.RandomNormal(seed=6), name="hashed")
static = sok.Variable(shape=[13, 2], initializer=keras.initializers.RandomNormal(seed=7))
opt = keras.optimizers.Adam(0.05)
batch = 12
lo, hi = batch * RANK // N, batch * (RANK + 1) // N
KEYS = np.array([-(2**63), -1, 0, 7, 2**31, 2**40 + 3, 2**63 - 1, 123456789], np.int64)


@tf.function
def train_step(keys, ids, up):
    with tf.GradientTape() as tape:
        h, s = sok.lookup_sparse([hashed, static], [keys, ids], combiners=["mean", "sum"])
        loss = (tf.reduce_sum(h * up) + tf.reduce_sum(s)) / batch
    grads = tape.gradient(loss, [hashed, static])
    with sok.OptimizerScope([hashed, static]):
        opt.apply_gradients(zip(grads, [hashed, static]))


for step in range(steps):
    rng = np.random.default_rng(step)
    keys = [
        KEYS[rng.integers(0, len(KEYS), size=k)].tolist() for k in rng.integers(0, 4, size=batch)
    ]
    ids = [rng.integers(0, 13, size=k).tolist() for k in rng.integers(1, 3, size=batch)]
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
    static=static.numpy(),
    size=int(hashed.size()),
)
report.write(num_ranks=N)
