"""Distributed lookup_sparse checks, run on every rank by horovodrun (see test_horovod_lookup.py).

Each rank takes its contiguous share of a global batch; outputs and gradients are compared with
TF's single-process lookup (tf.nn.safe_embedding_lookup_sparse) on the whole batch.
"""

import sys

import horovod.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf

import sok_lite as sok
from sok_lite.tables.initializers import RowInitializer
from tests.common import ragged
from tests.distributed.workers.lookup_worker_cases import multi_table_reference
from tests.distributed.workers.report import Report
from tests.ops.lookup.lookup_cases import lookup_and_gradients

hvd.init()
sok.init("horovod")
RANK, N = hvd.rank(), hvd.size()
report = Report(sys.argv[1], RANK)
RTOL, ATOL = 1e-5, 1e-6


def share(batch: int) -> slice:
    return slice(batch * RANK // N, batch * (RANK + 1) // N)


def local_part(global_rows: np.ndarray, var: sok.Variable) -> np.ndarray:
    """The rows of a global array that this rank's shard of `var` holds."""
    if var.placement.kind == "distributed":
        return global_rows[RANK::N]
    return global_rows if RANK == var.placement.rank else global_rows[:0]


def dense_local_grad(grad, var) -> np.ndarray:
    if grad is None:
        return np.zeros(var.shape, var.dtype.as_numpy_dtype)
    return tf.convert_to_tensor(grad).numpy()


def check_design_example():
    for modes in (("distributed", "distributed"), ("localized:0", f"localized:{N - 1}")):
        v1 = sok.Variable(np.arange(17 * 3).reshape(17, 3), dtype=tf.float32, mode=modes[0])
        v2 = sok.Variable(np.arange(7 * 5).reshape(7, 5), dtype=tf.float32, mode=modes[1])
        ids1 = [[1, 1], [3, 4, 5]][share(2)]
        ids2 = [[1], [2, 3]][share(2)]
        with tf.GradientTape() as tape:
            o1, o2 = sok.lookup_sparse([v1, v2], [ragged(ids1, tf.int64), ragged(ids2, tf.int64)])
            loss = tf.reduce_sum(o1) + tf.reduce_sum(o2)
        np.testing.assert_array_equal(o1.numpy(), np.array([[6, 8, 10], [36, 39, 42]])[share(2)])
        np.testing.assert_array_equal(
            o2.numpy(), np.array([[5, 6, 7, 8, 9], [25, 27, 29, 31, 33]])[share(2)]
        )
        g1, g2 = tape.gradient(loss, [v1, v2])
        if modes[0] == "distributed" and N == 2:
            assert v1.shape == [(9, 3), (8, 3)][RANK], v1.shape
            assert g1.values.shape == [(1, 3), (3, 3)][RANK], g1.values.shape
            assert g2.values.shape == [(1, 5), (2, 5)][RANK], g2.values.shape
        if modes[0] == "localized:0" and N == 2:
            assert g1.values.shape == [(4, 3), (0, 3)][RANK], g1.values.shape
            assert g2.values.shape == [(0, 5), (3, 5)][RANK], g2.values.shape
        report.check()


def check_against_tf(seed: int, batch: int, use_function: bool):
    case, modes, specs, upstream, ref_out, ref_grad = multi_table_reference(seed, batch, N)
    variables = [sok.Variable(t, dtype=tf.float32, mode=m) for t, m in zip(case.tables, modes)]
    s = share(batch)
    sp_ids = [ragged(ids[s], spec[4]) for ids, spec in zip(case.ids, specs)]
    sp_w = [None if w is None else ragged(w[s], tf.float32) for w in case.weights]
    up = [u[s] for u in upstream]

    outs, grads = lookup_and_gradients(variables, sp_ids, sp_w, case.combiners, up, use_function)
    for t, var in enumerate(variables):
        msg = f"rank {RANK}/{N}, seed {seed}, batch {batch}, table {t} ({modes[t]})"
        np.testing.assert_allclose(
            outs[t].numpy(), ref_out[t][s], rtol=RTOL, atol=ATOL, err_msg=msg
        )
        if grads[t] is not None:
            indices = grads[t].indices.numpy()
            assert len(indices) == len(set(indices.tolist())), msg + ": duplicate gradient rows"
        np.testing.assert_allclose(
            dense_local_grad(grads[t], var),
            local_part(ref_grad[t], var),
            rtol=RTOL,
            atol=ATOL,
            err_msg=msg,
        )
        report.check()


def check_sgd_matches_single_process(steps: int = 50):
    rng = np.random.default_rng(7)
    rows, dim, batch = 31, 4, 12
    init = rng.standard_normal([rows, dim]).astype(np.float32)
    ours = sok.Variable(init)
    ref = tf.Variable(init)
    opt_ours, opt_ref = keras.optimizers.SGD(0.05), keras.optimizers.SGD(0.05)
    for step in range(steps):
        srng = np.random.default_rng(1000 + step)
        ids = [srng.integers(0, rows, size=k).tolist() for k in srng.integers(0, 5, size=batch)]
        up = srng.standard_normal([batch, dim]).astype(np.float32)
        with tf.GradientTape() as tape:
            out = sok.lookup_sparse(ours, ragged(ids[share(batch)], tf.int64), combiners="mean")
            loss = tf.reduce_sum(out * up[share(batch)])
        opt_ours.apply_gradients([(tape.gradient(loss, ours), ours)])
        with tf.GradientTape() as tape:
            sp = ragged(ids, tf.int64).to_sparse()
            out = tf.nn.safe_embedding_lookup_sparse(ref, sp, None, combiner="mean")
            loss = tf.reduce_sum(out * up)
        opt_ref.apply_gradients([(tape.gradient(loss, ref), ref)])
    np.testing.assert_allclose(ours.numpy(), ref.numpy()[RANK::N], rtol=1e-5, atol=1e-6)
    report.check()


def check_initializer_is_rank_independent():
    init = keras.initializers.TruncatedNormal(stddev=0.1, seed=9)
    v = sok.Variable(shape=[17, 4], initializer=init)
    # The whole table as one rank would build it: every global row id.
    full = RowInitializer("truncated_normal", 0.0, 0.1, seed=9)(tf.range(17), 4, tf.float32)
    np.testing.assert_array_equal(v.numpy(), full.numpy()[RANK::N])
    report.check()


check_design_example()
check_initializer_is_rank_independent()
for seed, batch in [(0, 9), (1, 1), (2, 0), (3, 16)]:  # batch 1 and 0: ranks with no samples
    check_against_tf(seed, batch, use_function=bool(seed % 2))
check_sgd_matches_single_process()
report.write(num_ranks=N)
