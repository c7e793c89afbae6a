"""lookup_sparse against TF's own safe_embedding_lookup_sparse: forward and gradients."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from tests.ops.lookup.lookup_cases import (
    as_input,
    lookup_and_gradients,
    random_case,
    tf_reference,
)

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")

RTOL, ATOL = 1e-5, 1e-6

GRID = list(
    itertools.product(
        ["sum", "mean", "sqrtn"], [False, True], [tf.int32, tf.int64], ["ragged", "sparse"]
    )
)


def run_ours(case, upstream, kind, use_function):
    variables = [sok.Variable(t, dtype=case.value_dtype) for t in case.tables]
    sp_ids = [as_input(ids, case.id_dtype, kind) for ids in case.ids]
    sp_w = [None if w is None else as_input(w, case.value_dtype, kind) for w in case.weights]

    outs, grads = lookup_and_gradients(
        variables, sp_ids, sp_w, case.combiners, upstream, use_function
    )
    return variables, outs, grads


@pytest.mark.parametrize("combiner,weighted,id_dtype,kind", GRID)
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_tf(seed, combiner, weighted, id_dtype, kind):
    case = random_case(
        seed * 100 + GRID.index((combiner, weighted, id_dtype, kind)), combiner, weighted, id_dtype
    )
    rng = np.random.default_rng(seed)
    batch = len(case.ids[0])
    upstream = [rng.standard_normal([batch, t.shape[1]]).astype(np.float32) for t in case.tables]
    ref_out, ref_grad = tf_reference(case, upstream)
    _, outs, grads = run_ours(case, upstream, kind, use_function=bool(seed % 2))
    for t in range(len(case.tables)):
        msg = f"table {t}, combiner {combiner}, weighted {weighted}, ids {id_dtype.name}, {kind}"
        np.testing.assert_allclose(outs[t].numpy(), ref_out[t], rtol=RTOL, atol=ATOL, err_msg=msg)
        assert isinstance(grads[t], tf.IndexedSlices), msg
        np.testing.assert_allclose(
            tf.convert_to_tensor(grads[t]).numpy(), ref_grad[t], rtol=RTOL, atol=ATOL, err_msg=msg
        )


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_float64_tables(combiner):
    case = random_case(7, combiner, True, tf.int64, value_dtype=tf.float64, num_tables=2)
    upstream = [np.ones([len(case.ids[0]), t.shape[1]]) for t in case.tables]
    ref_out, ref_grad = tf_reference(case, upstream)
    _, outs, grads = run_ours(case, upstream, "ragged", use_function=False)
    for t in range(2):
        assert outs[t].dtype == tf.float64
        np.testing.assert_allclose(outs[t].numpy(), ref_out[t], rtol=1e-12)
        np.testing.assert_allclose(tf.convert_to_tensor(grads[t]).numpy(), ref_grad[t], rtol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_gradient_has_one_row_per_unique_id(seed):
    case = random_case(seed, "sum", False, tf.int64, num_tables=2)
    upstream = [np.ones([len(case.ids[0]), t.shape[1]], np.float32) for t in case.tables]
    _, _, grads = run_ours(case, upstream, "ragged", use_function=False)
    for t, grad in enumerate(grads):
        expected = {i for row in case.ids[t] for i in row}
        indices = grad.indices.numpy().tolist()
        assert len(indices) == len(set(indices)), f"table {t}: duplicate rows {indices}"
        assert set(indices) == expected, f"table {t}"
        # Each unique row's gradient is the sum over its occurrences (upstream all ones).
        counts = {i: sum(row.count(i) for row in case.ids[t]) for i in expected}
        for i, value in zip(indices, grad.values.numpy()):
            np.testing.assert_allclose(value, counts[i], rtol=RTOL)


def test_mixed_id_dtypes_and_input_kinds_in_one_call():
    v1 = sok.Variable(np.arange(12.0).reshape(6, 2), dtype=tf.float32)
    v2 = sok.Variable(np.arange(15.0).reshape(5, 3), dtype=tf.float32)
    ids1 = tf.ragged.constant([[0, 5], [2]], dtype=tf.int32)
    ids2 = tf.ragged.constant([[4], [1, 1]], dtype=tf.int64).to_sparse()
    o1, o2 = sok.lookup_sparse([v1, v2], [ids1, ids2], combiners=["sum", "mean"])
    np.testing.assert_allclose(o1.numpy(), [[10, 12], [4, 5]])
    np.testing.assert_allclose(o2.numpy(), [[12, 13, 14], [3, 4, 5]])
