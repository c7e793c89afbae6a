"""Kernel bugs the op fuzzer found: every one is fixed, and its minimal reproduction runs in
test_op_fuzz.py as a regression test (a fixed kernel rejects the malformed input with an
error instead of crashing).

Most of them shared two causes: eager execution does not run shape functions, so a kernel saw
inputs of any rank (`scalar<int64>()` and `dim_size(1)` then CHECK-failed), and
`TensorShape({a, b})` CHECK-failed on a negative or overflowing size instead of returning an
error. kernels/tf/input_checks.h now checks both.
"""

import dataclasses
from collections.abc import Callable

import numpy as np

from tests.ops.fuzz.op_fuzz_cases import INT64_MAX, NUM_PARAMS, Case


@dataclasses.dataclass(frozen=True)
class Finding:
    """A bug: what it is, which cases trigger it and a minimal one.

    must_reject: a fixed kernel rejects the reproduction (else it only must not crash).
    sanitizers_only: the bug shows only under scripts/run_sanitized_tests.sh (undefined
      behaviour or an out-of-bounds access that does not crash).
    """

    name: str
    summary: str
    matches: Callable[[Case], bool]
    reproduction: Case
    must_reject: bool = True
    sanitizers_only: bool = False


def known_finding(case: Case) -> Finding | None:
    """The first known finding that `case` triggers, if any."""
    return next((f for f in FINDINGS if f.matches(case)), None)


# ------------------------------------------------------------------ predicates


def _op(case: Case, op: str, eager_only: bool = False) -> bool:
    return case.op == "sok_lite_" + op and not (eager_only and case.graph)


def _fits(value: int) -> bool:
    return -(2**63) <= value <= INT64_MAX


def _id_message_overflows(case: Case) -> bool:
    """ParseIdMessage (kernels/core/exchange.cc) overflows int64 summing this message's counts."""
    if not (_op(case, "gather_for_peers") or _op(case, "reduce_for_owner")):
        return False
    tables = len(case.kwargs.get("handles", case.kwargs.get("dims")))
    message, at = np.ravel(case.kwargs["message"]).tolist(), 0
    for size in np.ravel(case.kwargs["splits"]).tolist():
        end = at + size
        if not _fits(end):
            return True
        if size < tables or end > len(message):
            return False
        ids_at = at + tables
        for t in range(tables):
            count = message[at + t]
            if not _fits(ids_at + count):
                return True
            if count < 0 or ids_at + count > end:
                return False
            ids_at += count
        if ids_at != end:
            return False
        at = end
    return False


def _dims_beyond_outputs(case: Case) -> bool:
    """A graph gets UnpackRows / ReduceForOwner with more dims than its N outputs."""
    ops = _op(case, "unpack_rows") or _op(case, "reduce_for_owner")
    return ops and case.graph and len(case.kwargs["dims"]) > case.kwargs["N"]


def _ndim(value) -> int:
    return np.ndim(value) if isinstance(value, np.ndarray) else 2


def _not_scalar(op: str, arg: str, eager_only: bool) -> Callable[[Case], bool]:
    """The op gets a non-scalar where its kernel calls scalar<int64>() unchecked."""

    def matches(case: Case) -> bool:
        if not _op(case, op, eager_only):
            return False
        values = case.kwargs[arg]
        return any(_ndim(v) != 0 for v in (values if isinstance(values, list) else [values]))

    return matches


def _not_matrix(op: str, arg: str) -> Callable[[Case], bool]:
    """Eagerly, the op gets a tensor of rank != 2 where its kernel calls dim_size(1) unchecked."""

    def matches(case: Case) -> bool:
        if not _op(case, op, eager_only=True):
            return False
        values = case.kwargs[arg]
        return any(_ndim(v) != 2 for v in (values if isinstance(values, list) else [values]))

    return matches


def _short_hyper(case: Case) -> bool:
    hyper, kind = np.asarray(case.kwargs["hyper"]), case.kwargs["kind"]
    return kind in NUM_PARAMS and 2 <= hyper.size < 2 + NUM_PARAMS[kind]


def _grads_misfit(case: Case) -> bool:
    grads, indices = case.kwargs["grads"], case.kwargs["indices"]
    return _ndim(grads) != 2 or grads.shape[0] != np.size(indices)


def _bad_dims(case: Case) -> bool:
    """dims with a negative entry or one that overflows int64 over the message's ids."""
    message = case.kwargs.get("message", case.kwargs.get("counts"))
    return any(d < 0 or d * max(np.size(message), 1) > INT64_MAX for d in case.kwargs["dims"])


def _table_dim(case: Case) -> int | None:
    table = case.kwargs["table"]
    return table["dim"] if isinstance(table, dict) and table["resource"] == "table" else None


# ------------------------------------------------------------------ reproduction inputs

I64 = np.int64
EMPTY = np.zeros([0], I64)
TABLE = {"resource": "table", "name": "t", "dim": 2, "init_kind": "constant", "seed": 0}


def _var(shape) -> dict:
    return {"resource": "variable", "shape": shape, "dtype": "float32"}


def _combine_args(num_unique=None) -> dict:
    """The inputs of the combine ops after rows / grads: one sample of one id."""
    kwargs = {"inverse": [np.zeros([1], np.int32)], "row_splits": [np.array([0, 1], I64)]}
    kwargs["weights"] = [np.zeros([0], np.float32)]
    if num_unique is not None:
        kwargs["num_unique"] = [num_unique]
    return kwargs | {"combiners": ["sum"]}


def _case(op: str, **kwargs) -> Case:
    return Case("sok_lite_" + op, kwargs)


def _unpack_case(N: int, dims: list) -> Case:  # noqa: N803 (the op's attribute name)
    """UnpackRows of an empty vector message for one rank: only N and dims vary."""
    return _case(
        "unpack_rows",
        vectors=np.zeros([0], np.float32),
        counts=np.zeros([1], I64),
        send_pos=np.zeros([0], np.int32),
        N=N,
        dims=dims,
    )


FINDINGS = [
    Finding(
        "init_rows_cost_overflow",
        "InitRows: the ParallelFor cost 40 * dim + 1 overflows int64 for dim >= 2**57 (signed "
        "overflow, undefined behaviour; reachable with no row ids, when the output is empty)",
        lambda c: _op(c, "init_rows") and 40 * c.kwargs["dim"] + 1 > INT64_MAX,
        Case(
            "sok_lite_init_rows",
            {"row_ids": np.zeros([0], np.int64), "dtype": "float32", "dim": 2**62}
            | {"kind": "constant", "seed": 0},
        ),
        must_reject=False,
        sanitizers_only=True,
    ),
    Finding(
        "exchange_shape_fn_dims_beyond_n",
        "UnpackRows / ReduceForOwner shape functions call set_output(t) for every dims entry; "
        "with len(dims) > N, InferenceContext::set_output's outputs_.at() throws "
        "std::out_of_range while TF holds the graph's mutex, which is never released: the "
        "process hangs at the next graph operation",
        _dims_beyond_outputs,
        Case(
            "sok_lite_unpack_rows",
            {
                "vectors": np.zeros([0], np.float32),
                "counts": np.zeros([2], np.int64),
                "send_pos": np.zeros([0], np.int32),
                "N": 1,
                "dims": [1, 2],
            },
            graph=True,
        ),
    ),
    Finding(
        "id_message_count_overflow",
        "GatherForPeers / ReduceForOwner: ParseIdMessage sums counts in int64 unchecked; counts "
        "that wrap around to the segment length pass, and the kernels then read the message "
        "(ReduceForOwner: exchange_kernels.cc, requested.push_back) far past its end; SIGSEGV",
        _id_message_overflows,
        Case(
            "sok_lite_reduce_for_owner",
            {
                "grads": np.zeros([0], np.float32),
                "message": np.array([INT64_MAX, INT64_MAX, 3, 7], np.int64),
                "splits": np.array([4], np.int64),
                "N": 3,
                "dims": [0, 0, 0],
            },
        ),
    ),
    Finding(
        "row_splits_nrows_int64_max",
        "RowSplitsFromRowIds: nrows + 1 overflows for nrows = 2**63 - 1; TensorShape CHECK abort",
        lambda c: (
            _op(c, "row_splits_from_row_ids")
            and _ndim(c.kwargs["nrows"]) == 0
            and c.kwargs["nrows"] == INT64_MAX
        ),
        _case("row_splits_from_row_ids", row_ids=EMPTY, nrows=np.array(INT64_MAX, I64)),
    ),
    Finding(
        "row_splits_nrows_not_scalar",
        "RowSplitsFromRowIds: eager nrows of shape [k] reaches scalar<int64>(); CHECK abort",
        _not_scalar("row_splits_from_row_ids", "nrows", eager_only=True),
        _case("row_splits_from_row_ids", row_ids=EMPTY, nrows=EMPTY),
    ),
    Finding(
        "segment_combine_rows_not_matrix",
        "SegmentCombine: eager rows of rank != 2 reach dim_size(1); CHECK abort",
        _not_matrix("segment_combine", "rows"),
        _case("segment_combine", rows=[np.zeros([3], np.float32)], **_combine_args()),
    ),
    Finding(
        "segment_combine_grad_grads_not_matrix",
        "SegmentCombineGrad: eager grads of rank != 2 reach dim_size(1); CHECK abort",
        _not_matrix("segment_combine_grad", "grads"),
        _case(
            "segment_combine_grad",
            grads=[np.zeros([1], np.float32)],
            **_combine_args(np.array(1, I64)),
        ),
    ),
    Finding(
        "segment_combine_grad_num_unique_not_scalar",
        "SegmentCombineGrad: eager num_unique of shape [k] reaches scalar<int64>(); CHECK abort",
        _not_scalar("segment_combine_grad", "num_unique", eager_only=True),
        _case("segment_combine_grad", grads=[np.zeros([1, 1], np.float32)], **_combine_args(EMPTY)),
    ),
    Finding(
        "segment_combine_grad_shape_overflow",
        "SegmentCombineGrad: num_unique * dim beyond int64 makes TensorShape({num_unique, dim}) "
        "CHECK-fail; abort",
        lambda c: (
            _op(c, "segment_combine_grad")
            and any(
                _ndim(u) == 0 and _ndim(g) == 2 and int(u) * g.shape[1] > INT64_MAX
                for u, g in zip(c.kwargs["num_unique"], c.kwargs["grads"])
            )
        ),
        _case(
            "segment_combine_grad",
            grads=[np.zeros([1, 3], np.float32)],
            **_combine_args(np.array(2**62, I64)),
        ),
    ),
    Finding(
        "sparse_apply_short_hyper",
        "SparseApply: a hyper vector shorter than the optimizer's parameters is read past its "
        "end (ApplyRows indexes OptimizerHyper::p unchecked); SIGSEGV or garbage parameters",
        lambda c: _op(c, "sparse_apply") and _short_hyper(c),
        _case(
            "sparse_apply",
            var=_var([1, 1]),
            slots=[_var([1, 1]) | {"fill": 1.0}, _var([1, 1]) | {"fill": 2.0}],
            indices=np.zeros([1], I64),
            grads=np.zeros([1, 1], np.float32),
            hyper=np.zeros([2]),
            step=np.array(1, I64),
            kind="adam",
            trackers=[],
        ),
    ),
    Finding(
        "sparse_apply_grads_misfit",
        "SparseApply: eager grads not shaped [len(indices), dim] are not rejected: rank != 2 "
        "CHECK-aborts in dim_size(1), fewer rows than indices are read past the buffer's end",
        lambda c: _op(c, "sparse_apply", eager_only=True) and _grads_misfit(c),
        _case(
            "sparse_apply",
            var=_var([4, 2]),
            slots=[],
            indices=np.arange(4, dtype=I64),
            grads=np.ones([1, 2], np.float32),
            hyper=np.array([0.1, 0.0]),
            step=np.array(1, I64),
            kind="sgd",
            trackers=[],
        ),
    ),
    Finding(
        "init_rows_shape_overflow",
        "InitRows: len(row_ids) * dim beyond int64 makes TensorShape({n, dim}) CHECK-fail; abort",
        lambda c: (
            _op(c, "init_rows") and np.size(c.kwargs["row_ids"]) * c.kwargs["dim"] > INT64_MAX
        ),
        _case(
            "init_rows",
            row_ids=np.zeros([2], I64),
            dtype="float32",
            dim=2**62,
            kind="constant",
            seed=0,
        ),
    ),
    Finding(
        "partition_message_size_overflow",
        "PartitionByOwner: num_ranks * N + ids beyond int64 overflows the message size; "
        "TensorShape CHECK abort",
        lambda c: (
            _op(c, "partition_by_owner")
            and c.kwargs["num_ranks"] * len(c.kwargs["unique_ids"])
            + sum(np.size(u) for u in c.kwargs["unique_ids"])
            > INT64_MAX
        ),
        _case(
            "partition_by_owner", unique_ids=[EMPTY] * 2, num_ranks=2**62, localized_ranks=[-1] * 2
        ),
    ),
    Finding(
        "partition_shape_fn_int32_attr",
        "PartitionByOwner's shape function reads num_ranks as int32 under TF_CHECK_OK: a graph "
        "with num_ranks >= 2**31 aborts the process while it is built",
        lambda c: _op(c, "partition_by_owner") and c.graph and c.kwargs["num_ranks"] >= 2**31,
        dataclasses.replace(
            _case("partition_by_owner", unique_ids=[EMPTY], num_ranks=2**40, localized_ranks=[-1]),
            graph=True,
        ),
    ),
    Finding(
        "gather_for_peers_bad_dims",
        "GatherForPeers: a negative or huge dims entry makes the vector message size negative; "
        "TensorShape CHECK abort",
        lambda c: _op(c, "gather_for_peers") and _bad_dims(c),
        _case(
            "gather_for_peers",
            handles=[_var([2, 2])],
            message=np.array([1, 0], I64),
            splits=np.array([2], I64),
            dtype="float32",
            dims=[-1],
            dynamic=[False],
            table_names=["a"],
        ),
    ),
    Finding(
        "unpack_rows_empty_dims",
        "UnpackRows: dims = [] makes CheckLayout divide by zero tables; SIGFPE",
        lambda c: _op(c, "unpack_rows") and not c.kwargs["dims"],
        _unpack_case(N=1, dims=[]),
    ),
    Finding(
        "unpack_rows_bad_dims",
        "UnpackRows: a negative dims entry reaches TensorShape({rows, dim}); CHECK abort",
        lambda c: _op(c, "unpack_rows") and _bad_dims(c),
        _unpack_case(N=1, dims=[-1]),
    ),
    Finding(
        "exchange_dims_not_n",
        "UnpackRows / ReduceForOwner: len(dims) != N is not checked; with fewer dims the extra "
        "outputs are never allocated and the call succeeds",
        lambda c: (
            (_op(c, "unpack_rows") or _op(c, "reduce_for_owner"))
            and 0 < len(c.kwargs["dims"]) < c.kwargs["N"]
        ),
        _unpack_case(N=2, dims=[1]),
    ),
    Finding(
        "reduce_for_owner_empty_dims",
        "ReduceForOwner: dims = [] parses the message as zero tables and allocates no output; "
        "the call succeeds with N unset outputs",
        lambda c: _op(c, "reduce_for_owner") and not c.kwargs["dims"],
        _case(
            "reduce_for_owner",
            grads=np.zeros([0], np.float32),
            message=EMPTY,
            splits=EMPTY,
            N=1,
            dims=[],
        ),
    ),
    Finding(
        "reduce_for_owner_bad_dims",
        "ReduceForOwner: a negative dims entry reaches TensorShape({rows, dim}); CHECK abort",
        lambda c: _op(c, "reduce_for_owner") and _bad_dims(c),
        _case(
            "reduce_for_owner",
            grads=np.zeros([0], np.float32),
            message=np.array([0], I64),
            splits=np.array([1], I64),
            N=1,
            dims=[-1],
        ),
    ),
    Finding(
        "dynamic_lookup_ignores_dim",
        "DynamicLookup: returns [n, table dim] whatever its dim attr says, so a graph's static "
        "shape [n, dim] can be wrong",
        lambda c: _op(c, "dynamic_lookup") and _table_dim(c) not in (None, c.kwargs["dim"]),
        _case("dynamic_lookup", table=TABLE, keys=np.array([1], I64), dim=3),
    ),
    Finding(
        "dynamic_lookup_shape_overflow",
        "DynamicLookup: len(keys) * table dim beyond int64 (the dim attr of SokLiteDynamicTable "
        "is unbounded) makes TensorShape({n, dim}) CHECK-fail; abort",
        lambda c: (
            _op(c, "dynamic_lookup")
            and np.size(c.kwargs["keys"]) * (_table_dim(c) or 0) > INT64_MAX
        ),
        _case(
            "dynamic_lookup", table=TABLE | {"dim": 2**62}, keys=np.array([1, 2], I64), dim=2**62
        ),
    ),
    Finding(
        "dynamic_apply_step_not_scalar",
        "DynamicApply: a step of shape [k] reaches scalar<int64>() (no shape check, eager or "
        "graph); CHECK abort",
        _not_scalar("dynamic_apply", "step", eager_only=False),
        _case(
            "dynamic_apply",
            table=TABLE,
            keys=EMPTY,
            grads=np.zeros([0, 2], np.float32),
            hyper=np.array([0.1, 0.0]),
            step=EMPTY,
            kind="sgd",
            slot_init=[],
        ),
    ),
    Finding(
        "dynamic_apply_short_hyper",
        "DynamicApply: a hyper vector shorter than the optimizer's parameters was accepted on the "
        "CPU and read past its end once a key had a stored row (the GPU kernel checked it)",
        lambda c: _op(c, "dynamic_apply") and _short_hyper(c),
        _case(
            "dynamic_apply",
            table=TABLE,
            keys=np.array([1], I64),
            grads=np.zeros([1, 2], np.float32),
            hyper=np.array([0.1, 0.0]),
            step=np.array(1, I64),
            kind="adam",
            slot_init=[0.0, 0.0],
        ),
    ),
    Finding(
        "dynamic_export_since_step_not_scalar",
        "DynamicExport: a since_step of shape [k] reaches scalar<int64>(); CHECK abort",
        _not_scalar("dynamic_export", "since_step", eager_only=False),
        _case("dynamic_export", table=TABLE, since_step=EMPTY),
    ),
    Finding(
        "dynamic_assign_step_not_scalar",
        "DynamicAssign: a step of shape [k] reaches scalar<int64>(); CHECK abort",
        _not_scalar("dynamic_assign", "step", eager_only=False),
        _case(
            "dynamic_assign",
            table=TABLE,
            keys=EMPTY,
            values=np.zeros([0, 2], np.float32),
            step=EMPTY,
        ),
    ),
    Finding(
        "dynamic_evict_steps_not_scalar",
        "DynamicEvict: a steps_unseen of shape [k] reaches scalar<int64>(); CHECK abort",
        _not_scalar("dynamic_evict", "steps_unseen", eager_only=False),
        _case("dynamic_evict", table=TABLE, steps_unseen=EMPTY),
    ),
]
