"""SOK first-API layers on N ranks: each rank's outputs and one SGD step on the sharded tables
match NumPy on the whole table (checked here, on every rank; test_horovod_sok_v1.py)."""

import sys

import horovod.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf

import sok_lite as sok
from tests.distributed.workers.report import Report

hvd.init()
GLOBAL_BATCH, PER_GPU, DIM, SLOTS = 8, 11, 3, 2
assert sok.Init(global_batch_size=GLOBAL_BATCH) == "OK"
RANK, N = sok.rank(), sok.num_ranks()
report = Report(sys.argv[1], RANK)
share = slice(RANK * GLOBAL_BATCH // N, (RANK + 1) * GLOBAL_BATCH // N)
rng = np.random.default_rng(0)  # the same global batch on every rank


def global_table(layer) -> np.ndarray:
    """The whole table from every rank's shard (global row i is local row i // N of rank i % N)."""
    shards = hvd.allgather(tf.convert_to_tensor(layer.embedding_variable)).numpy()
    assert shards.shape == (PER_GPU * N, DIM)
    local = shards.reshape(N, PER_GPU, DIM)
    return np.stack([local[i % N, i // N] for i in range(PER_GPU * N)])


def check_step(layer, inputs, upstream, reference):
    """Output of this rank's share, then one SGD(1.0) step on sum(output * upstream)."""
    layer(inputs)
    before = global_table(layer)
    with tf.GradientTape() as tape:
        out = layer(inputs)
        loss = tf.reduce_sum(out * upstream)
    expected_out, expected_grad = reference(before)
    np.testing.assert_allclose(out.numpy(), expected_out, rtol=1e-6, atol=1e-7)
    grads = tape.gradient(loss, [layer.embedding_variable])
    with sok.OptimizerScope([layer.embedding_variable]):
        keras.optimizers.SGD(1.0).apply_gradients(zip(grads, [layer.embedding_variable]))
    np.testing.assert_allclose(global_table(layer), before - expected_grad, rtol=1e-5, atol=1e-6)
    report.check(2)


# All2AllDenseEmbedding: every id looked up.
ids = rng.integers(0, PER_GPU * N, [GLOBAL_BATCH, SLOTS, 2])
up = rng.standard_normal([GLOBAL_BATCH, SLOTS, 2, DIM]).astype(np.float32)


def dense_reference(table):
    grad = np.zeros_like(table)
    np.add.at(grad, ids.reshape(-1), up.reshape(-1, DIM))  # every rank's samples
    return table[ids[share]], grad


dense = sok.All2AllDenseEmbedding(PER_GPU, DIM, slot_num=SLOTS, nnz_per_slot=2)
check_step(dense, tf.constant(ids[share]), up[share], dense_reference)

# DistributedEmbedding: ids of each (sample, slot) averaged.
rows = [list(rng.integers(0, PER_GPU * N, rng.integers(0, 4))) for _ in range(GLOBAL_BATCH * SLOTS)]
up = rng.standard_normal([GLOBAL_BATCH, SLOTS, DIM]).astype(np.float32)


def sparse_reference(table):
    out = np.zeros([GLOBAL_BATCH * SLOTS, DIM], np.float32)
    grad = np.zeros_like(table)
    flat_up = up.reshape(-1, DIM)
    for r, row in enumerate(rows):
        if row:
            out[r] = table[row].mean(axis=0)
            np.add.at(grad, row, np.repeat(flat_up[r : r + 1] / len(row), len(row), axis=0))
    return out.reshape(GLOBAL_BATCH, SLOTS, DIM)[share], grad


lo, hi = share.start * SLOTS, share.stop * SLOTS
local_rows = tf.ragged.constant(rows[lo:hi], dtype=tf.int64, ragged_rank=1, inner_shape=())
sparse = sok.DistributedEmbedding("Mean", PER_GPU, DIM, slot_num=SLOTS, max_nnz=3)
check_step(sparse, local_rows.to_sparse(), up[share], sparse_reference)

report.write(num_ranks=N)
