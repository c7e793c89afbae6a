"""The multi-table lookup case shared by the Horovod and tf.distribute workers."""

import numpy as np
import tensorflow as tf

from tests.ops.lookup.lookup_cases import Case, tf_reference


def multi_table_case(seed: int, batch: int, N: int) -> tuple[Case, list, list]:
    """4 tables: weighted/unweighted, every combiner, int32 and int64 ids, a 1-row table, a
    localized table and a table whose ids all live on rank 0."""
    rng = np.random.default_rng(seed)
    specs = [  # rows, dim, combiner, weighted, id dtype, mode
        (23, 4, "sum", True, tf.int64, "distributed"),
        (1, 3, "mean", False, tf.int32, "distributed"),
        (10, 5, "sqrtn", True, tf.int64, f"localized:{N - 1}"),
        (16, 2, "mean", True, tf.int32, "distributed"),
    ]
    tables, ids, weights, combiners, modes = [], [], [], [], []
    for t, (rows, dim, combiner, weighted, _, mode) in enumerate(specs):
        tables.append(rng.standard_normal([rows, dim]))
        lens = rng.integers(0, 6, size=batch)
        row_ids = [rng.integers(0, rows, size=k) for k in lens]
        if t == 3:  # every id a multiple of N: all owned by rank 0
            row_ids = [(r // N) * N for r in row_ids]
        ids.append([r.tolist() for r in row_ids])
        weights.append([rng.uniform(0.1, 2, size=k).tolist() for k in lens] if weighted else None)
        combiners.append(combiner)
        modes.append(mode)
    return Case(tables, ids, weights, combiners, tf.int64, tf.float32), modes, specs


def multi_table_reference(seed: int, batch: int, N: int):
    """multi_table_case(seed, batch, N), random upstream gradients of its outputs, and TF's
    outputs and dense table gradients for them: (case, modes, specs, upstream, ref_out,
    ref_grad)."""
    case, modes, specs = multi_table_case(seed, batch, N)
    rng = np.random.default_rng(seed + 1)
    upstream = [rng.standard_normal([batch, t.shape[1]]).astype(np.float32) for t in case.tables]
    ref_out, ref_grad = tf_reference(case, upstream)
    return case, modes, specs, upstream, ref_out, ref_grad
