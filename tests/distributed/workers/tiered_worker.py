"""A DynamicVariable with or without a disk tier, trained with Adam or loaded from a dump; each
rank saves its keys and rows (value and slots) for test_horovod_tiered.py.

argv: out_dir, mode ("train" or "load"), storage ("disk", "prefetch": disk with each next
batch's ids passed to sok.prefetch after a step, or "ram"), checkpoint path.
"""

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
out_dir, mode, storage, ckpt = sys.argv[1:5]
report = Report(out_dir, RANK)

DIM, POOL, STEPS, BATCH = 32, 3000, 16, 64
# Each rank holds ~1/N of ~1,800 rows of 96 floats (~0.8 MB over all ranks): 160 KiB per rank
# keeps most of them on disk.
tiered = storage in ("disk", "prefetch")
disk = sok.storage.Disk(f"{out_dir}/tier", ram_budget="160KiB") if tiered else None
table = sok.DynamicVariable(
    DIM, initializer=keras.initializers.RandomNormal(seed=6), name="tiered", storage=disk
)
opt = keras.optimizers.Adam(0.05)
lo, hi = BATCH * RANK // N, BATCH * (RANK + 1) // N


@tf.function
def train_step(keys, up):
    with tf.GradientTape() as tape:
        (h,) = sok.lookup_sparse([table], [keys], combiners=["mean"])
        loss = tf.reduce_sum(h * up) / BATCH
    grads = tape.gradient(loss, [table])
    with sok.OptimizerScope([table]):
        opt.apply_gradients(zip(grads, [table]))


def batch(step):
    rng = np.random.default_rng(step)
    hot = rng.integers(step * 60, step * 60 + 400, (BATCH, 2)) % POOL
    ids = np.concatenate([hot, rng.integers(0, POOL, (BATCH, 1))], axis=1) * 7919 - 2**50
    up = rng.standard_normal([BATCH, DIM]).astype(np.float32)
    return tf.constant(ids[lo:hi]), up[lo:hi]


read = 0
if mode == "train":
    for step in range(STEPS):
        train_step(*batch(step))
        if storage == "prefetch" and step + 1 < STEPS:  # this rank's keys of its next batch
            read += int(sok.prefetch(table, batch(step + 1)[0], wait_for_lookup=False))
    if ckpt:
        sok.dump(ckpt, [table], opt)
else:
    sok.load(ckpt, [table], opt)

keys, rows = table.export(with_slots=True)
stats = table.memory_stats()
if tiered:
    assert stats["rows_disk"] > 0 and stats["spills"] > 0, stats
report.check(len(keys))
np.savez(
    f"{out_dir}/arrays{RANK}.npz", keys=keys.numpy(), rows=rows.numpy(), size=int(table.size())
)
report.write(
    num_ranks=N,
    rows_disk=stats["rows_disk"],
    rows_ram=stats["rows_ram"],
    misses=stats["misses"],
    read=read,
)
