"""A MultiWorkerMirroredStrategy training loop (sharded-table lookups + row SGD, one replica per
worker, TF_CONFIG set by tests/distributed/test_rank_failure.py) in which the worker FAILING
kills itself with SIGKILL at step FAIL_AT_STEP. The survivor must exit non-zero by itself.

Usage: strategy_failure_worker.py OUT_DIR FAILING FAIL_AT_STEP  (FAILING: a TF_CONFIG task index)
"""

import json
import os
import signal
import sys

import numpy as np
import tensorflow as tf

import sok_lite as sok

failing, fail_at = int(sys.argv[2]), int(sys.argv[3])
WORKER = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    sok.init("strategy")
ROWS, STEPS = 17, 1000

# Each worker holds its own shard: created outside the scope, not mirrored.
users = sok.Variable(shape=[ROWS, 4], initializer="random_normal", name="users")


@tf.function
def train_step(ids):
    def replica_fn(ids):
        ids = tf.RaggedTensor.from_tensor(ids)
        with tf.GradientTape() as tape:
            (u,) = sok.lookup_sparse([users], [ids])
            loss = tf.reduce_sum(u * u)
        (grad,) = tape.gradient(loss, [users])
        # A plain row update: OptimizerScope creates its per-table variables inside
        # strategy.run, where they become mirrored and their shard-sized values clash.
        users.scatter_sub(tf.IndexedSlices(0.01 * grad.values, grad.indices))
        return loss

    return strategy.run(replica_fn, args=(ids,))


for step in range(STEPS):
    if step == fail_at:
        print(f"worker {WORKER} trained {step} steps", file=sys.stderr, flush=True)
        if WORKER == failing:
            os.kill(os.getpid(), signal.SIGKILL)
    ids = np.random.default_rng([step, WORKER]).integers(0, ROWS, size=[8, 2])
    train_step(tf.constant(ids, tf.int64))
print(f"worker {WORKER} finished training that should have failed", file=sys.stderr, flush=True)
