"""lookup_sparse under MultiWorkerMirroredStrategy (one replica per worker process, TF_CONFIG
set by tests/distributed/test_strategy_lookup.py), against TF's single-process lookup."""

import json
import os
import sys

import numpy as np
import tensorflow as tf

import sok_lite as sok
from tests.distributed.workers.lookup_worker_cases import multi_table_reference
from tests.distributed.workers.report import Report

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    communicator = sok.init("strategy")
RANK, N = communicator.rank, communicator.num_ranks
assert RANK == json.loads(os.environ["TF_CONFIG"])["task"]["index"]
report = Report(sys.argv[1], RANK)


def share(batch):
    return slice(batch * RANK // N, batch * (RANK + 1) // N)


def local_part(rows, var):
    if var.placement.kind == "distributed":
        return rows[RANK::N]
    return rows if RANK == var.placement.rank else rows[:0]


def check(seed, batch):
    case, modes, _, upstream, ref_out, ref_grad = multi_table_reference(seed, batch, N)
    tables = [sok.Variable(t, dtype=tf.float32, mode=m) for t, m in zip(case.tables, modes)]
    s = share(batch)

    def to_parts(rows, dtype):
        r = tf.ragged.constant(rows[s], dtype=dtype, ragged_rank=1, inner_shape=())
        return r.values, r.row_splits

    ids = [to_parts(i, tf.int64) for i in case.ids]
    weights = [() if w is None else to_parts(w, tf.float32) for w in case.weights]
    up = [u[s] for u in upstream]

    @tf.function
    def step(ids, weights, up):
        def replica_fn(ids, weights, up):
            sp = [tf.RaggedTensor.from_row_splits(v, r) for v, r in ids]
            sw = [tf.RaggedTensor.from_row_splits(*w) if w else None for w in weights]
            with tf.GradientTape() as tape:
                outs = sok.lookup_sparse(tables, sp, sw, combiners=case.combiners)
                loss = tf.add_n([tf.reduce_sum(o * u) for o, u in zip(outs, up)])
            grads = tape.gradient(loss, tables)
            return outs, [tf.convert_to_tensor(g) for g in grads]

        return strategy.run(replica_fn, args=(ids, weights, up))

    outs, grads = step(ids, weights, up)
    outs = [strategy.experimental_local_results(o)[0] for o in outs]
    grads = [strategy.experimental_local_results(g)[0] for g in grads]
    for t, var in enumerate(tables):
        msg = f"worker {RANK}/{N}, seed {seed}, table {t} ({modes[t]})"
        np.testing.assert_allclose(
            outs[t].numpy(), ref_out[t][s], rtol=1e-5, atol=1e-6, err_msg=msg
        )
        np.testing.assert_allclose(
            grads[t].numpy(), local_part(ref_grad[t], var), rtol=1e-5, atol=1e-6, err_msg=msg
        )
        report.check()


for seed, batch in [(0, 9), (1, 1), (3, 16)]:
    check(seed, batch)
report.write(num_ranks=N)
