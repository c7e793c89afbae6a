"""A training run (lookup + loss + OptimizerScope(Adam with global_clipnorm)) whose final tables
and slots the launching test compares between 1 and 2 ranks (test_horovod_optimizer.py).

argv[2], optional: the tables' dtype; argv[3], optional: their slot dtype (bfloat16 slots). A
16-bit run sums integer-valued gradients without clipping, so that every rank count computes the
same float32 rows bit for bit and the test can ask the same of the (stochastically) rounded
16-bit tables."""

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
out_dir = sys.argv[1]
report = Report(out_dir, RANK)

DTYPE = sys.argv[2] if len(sys.argv) > 2 else "float32"
SLOT_DTYPE = sys.argv[3] if len(sys.argv) > 3 else None
EXACT = DTYPE != "float32"

users = sok.Variable(
    shape=[37, 8],
    initializer=keras.initializers.RandomNormal(seed=4),
    dtype=DTYPE,
    slot_dtype=SLOT_DTYPE,
)
items = sok.Variable(
    shape=[11, 3],
    initializer="random_uniform",
    mode=f"localized:{N - 1}",
    dtype=DTYPE,
    slot_dtype=SLOT_DTYPE,
)
tables = [users, items]
opt = keras.optimizers.Adam(0.05) if EXACT else keras.optimizers.Adam(0.05, global_clipnorm=0.5)
COMBINERS = ["sum", "sum"] if EXACT else ["mean", "sum"]
batch = 16
lo, hi = batch * RANK // N, batch * (RANK + 1) // N


@tf.function
def train_step(user_ids, item_ids, up_u, up_i):
    with tf.GradientTape() as tape:
        u, i = sok.lookup_sparse(tables, [user_ids, item_ids], combiners=COMBINERS)
        loss = (tf.reduce_sum(u * up_u) + tf.reduce_sum(i * up_i)) / batch
    grads = tape.gradient(loss, tables)
    with sok.OptimizerScope(tables):
        opt.apply_gradients(zip(grads, tables))
    return loss


for step in range(20):
    rng = np.random.default_rng(step)
    uids = [rng.integers(0, 37, size=k).tolist() for k in rng.integers(0, 5, size=batch)]
    iids = [rng.integers(0, 11, size=k).tolist() for k in rng.integers(1, 3, size=batch)]
    if EXACT:
        up_u = rng.integers(-3, 4, [batch, 8]).astype(np.float32)
        up_i = rng.integers(-3, 4, [batch, 3]).astype(np.float32)
    else:
        up_u = rng.standard_normal([batch, 8]).astype(np.float32)
        up_i = rng.standard_normal([batch, 3]).astype(np.float32)
    train_step(
        tf.ragged.constant(uids[lo:hi], dtype=tf.int64, ragged_rank=1, inner_shape=()),
        tf.ragged.constant(iids[lo:hi], dtype=tf.int64, ragged_rank=1, inner_shape=()),
        up_u[lo:hi],
        up_i[lo:hi],
    )

assert int(opt.iterations) == 20
arrays = {}
for t, table in enumerate(tables):
    arrays[f"table{t}"] = tf.cast(table, tf.float32).numpy()  # 16-bit values widen exactly
    for name, slot in sok.opt_slots(opt, table).items():
        arrays[f"table{t}_{name}"] = tf.cast(slot, tf.float32).numpy()  # bfloat16: exact
        report.check()
np.savez(f"{out_dir}/arrays{RANK}.npz", **arrays)
report.write(num_ranks=N)
