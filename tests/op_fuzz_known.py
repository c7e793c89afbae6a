"""Kernel bugs the op fuzzer found: every one is fixed, and its minimal reproduction runs in
tests/test_op_fuzz.py as a regression test (a fixed kernel rejects the malformed input with an
error instead of crashing).

Most of them shared two causes: eager execution does not run shape functions, so a kernel saw
inputs of any rank (`scalar<int64>()` and `dim_size(1)` then CHECK-failed), and
`TensorShape({a, b})` CHECK-failed on a negative or overflowing size instead of returning an
error. kernels/tf/input_checks.h now checks both.
"""

import dataclasses
from collections.abc import Callable

import numpy as np

from tests.op_fuzz_cases import INT64_MAX, Case


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


def _op(case: Case, op: str) -> bool:
    return case.op == "sok_lite_" + op


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
]
