"""A training loop (lookups of a sharded and a hash table + Adam) in which the last rank fails
at a given step, after the ranks have trained together: it looks up an id beyond the table
("bad_id") or kills itself with SIGKILL ("sigkill"). The launching test checks that the whole
job ends quickly and names the cause (tests/distributed/test_rank_failure.py).

Usage: rank_failure_worker.py OUT_DIR {bad_id,sigkill} FAIL_AT_STEP
"""

import os
import signal
import sys

import horovod.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf

import sok_lite as sok

hvd.init()
sok.init("horovod")
RANK, N = hvd.rank(), hvd.size()
fault, fail_at = sys.argv[2], int(sys.argv[3])
ROWS, STEPS = 17, 1000

users = sok.Variable(shape=[ROWS, 4], initializer="random_normal", name="users")
items = sok.DynamicVariable(4, name="items")
tables = [users, items]
opt = keras.optimizers.Adam(0.01)


@tf.function
def train_step(user_ids, item_ids):
    with tf.GradientTape() as tape:
        u, i = sok.lookup_sparse(tables, [user_ids, item_ids])
        loss = tf.reduce_sum(u * i)
    grads = tape.gradient(loss, tables)
    with sok.OptimizerScope(tables):
        opt.apply_gradients(zip(grads, tables))
    return loss


def batch(step, bad):
    rng = np.random.default_rng([step, RANK])
    user_ids = rng.integers(0, ROWS, size=[8, 2])
    if bad:
        user_ids[0, 1] = ROWS
    item_ids = rng.integers(0, 1 << 40, size=[8, 2])
    as_ragged = lambda x: tf.RaggedTensor.from_tensor(tf.constant(x, tf.int64))  # noqa: E731
    return as_ragged(user_ids), as_ragged(item_ids)


failing = RANK == N - 1
for step in range(STEPS):
    if step == fail_at:
        print(f"rank {RANK} trained {step} steps", file=sys.stderr, flush=True)
        if failing and fault == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
    train_step(*batch(step, bad=failing and fault == "bad_id" and step == fail_at))
print(f"rank {RANK} finished training that should have failed", file=sys.stderr, flush=True)
