"""Fuzzes every registered SokLite* op through the raw op library with malformed inputs.

Each call must either succeed with outputs that pass a sanity check or raise
tf.errors.OpError, TypeError or ValueError; input the fuzzer knows to be malformed must raise.
The ops run in a child process (op_fuzz_worker.py), so a crash fails the test with the
input that caused it instead of killing pytest. The strategies are in op_fuzz_*_cases.py.

SOK_LITE_FUZZ_EXAMPLES: examples per test (default 20; raise it for long campaigns).
SOK_LITE_FUZZ_KNOWN=0: skip inputs that trigger the (fixed) findings of op_fuzz_known.py;
their reproductions always run as regression tests.
"""

import dataclasses
import os
import re

import pytest
from hypothesis import HealthCheck, given, reject, settings

from tests.ops.fuzz import op_fuzz_dynamic_cases as dynamic
from tests.ops.fuzz import op_fuzz_exchange_cases as exchange
from tests.ops.fuzz import op_fuzz_lookup_cases as lookup
from tests.ops.fuzz.op_fuzz_cases import Case
from tests.ops.fuzz.op_fuzz_known import FINDINGS, known_finding
from tests.ops.fuzz.op_fuzz_worker import OpWorker, WorkerCrash

EXAMPLES = int(os.environ.get("SOK_LITE_FUZZ_EXAMPLES", "20"))
# The findings of op_fuzz_known.py are fixed; drawing their triggers stays on by default.
INCLUDE_KNOWN = os.environ.get("SOK_LITE_FUZZ_KNOWN", "1") == "1"

fuzz = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,  # a call crosses a pipe and may trace a tf.function
    suppress_health_check=list(HealthCheck),
    print_blob=False,
)


@pytest.fixture(scope="module")
def worker():
    op_worker = OpWorker()
    yield op_worker
    op_worker.close()


def run(worker: OpWorker, cases: list[Case], skip_known: bool = not INCLUDE_KNOWN) -> None:
    """Runs cases in order in the worker and fails the test on any finding."""
    if skip_known:
        cases = [c for c in cases if known_finding(c) is None]
        if not cases:
            reject()
    listing = "\n".join(repr(c) for c in cases)
    try:
        results = worker.run([c.call() for c in cases])
    except WorkerCrash as e:
        crash = str(e)
    else:
        crash = ""
    if crash:
        pytest.fail(f"the process died running:\n{listing}\n{crash}", pytrace=False)
    for case, result in zip(cases, results):
        verify(case, result, listing)


def verify(case: Case, result: dict, listing: str) -> None:
    where = f"\n{case!r}" + (f"\nin the program:\n{listing}" if listing != repr(case) else "")
    if result["status"] == "signature":
        pytest.fail(f"the fuzz case does not fit the op: {result['message']}{where}", pytrace=False)
    if result["status"] == "unexpected":
        pytest.fail(f"{result['type']}: {result['message']}{where}", pytrace=False)
    if result["status"] == "raised":
        return
    if case.invalid:
        pytest.fail(f"malformed input accepted ({case.invalid}):{where}", pytrace=False)
    problem = ""
    if case.check is not None:
        try:
            case.check(result["outputs"])
        except AssertionError as e:
            problem = str(e)
    if problem:
        pytest.fail(f"bad output: {problem}{where}", pytrace=False)


@fuzz
@given(case=lookup.row_splits_from_row_ids())
def test_row_splits_from_row_ids(worker, case):
    run(worker, [case])


@fuzz
@given(case=lookup.unique_ids())
def test_unique_ids(worker, case):
    run(worker, [case])


@fuzz
@given(case=lookup.gather_rows())
def test_gather_rows(worker, case):
    run(worker, [case])


@fuzz
@given(case=lookup.segment_combine())
def test_segment_combine(worker, case):
    run(worker, [case])


@fuzz
@given(case=lookup.segment_combine(grad=True))
def test_segment_combine_grad(worker, case):
    run(worker, [case])


@fuzz
@given(case=lookup.init_rows())
def test_init_rows(worker, case):
    run(worker, [case])


@fuzz
@given(case=lookup.sparse_apply())
def test_sparse_apply(worker, case):
    run(worker, [case])


@fuzz
@given(case=exchange.partition_by_owner())
def test_partition_by_owner(worker, case):
    run(worker, [case])


@fuzz
@given(case=exchange.gather_for_peers())
def test_gather_for_peers(worker, case):
    run(worker, [case])


@fuzz
@given(case=exchange.unpack_rows())
def test_unpack_rows(worker, case):
    run(worker, [case])


@fuzz
@given(case=exchange.pack_rows())
def test_pack_rows(worker, case):
    run(worker, [case])


@fuzz
@given(case=exchange.reduce_for_owner())
def test_reduce_for_owner(worker, case):
    run(worker, [case])


@fuzz
@given(program=dynamic.dynamic_program())
def test_dynamic_table_ops(worker, program):
    run(worker, program)


FUZZED_OPS = {
    "SokLiteRowSplitsFromRowIds",
    "SokLiteUniqueIds",
    "SokLiteGatherRows",
    "SokLiteSegmentCombine",
    "SokLiteSegmentCombineGrad",
    "SokLiteInitRows",
    "SokLiteSparseApply",
    "SokLitePartitionByOwner",
    "SokLiteGatherForPeers",
    "SokLiteUnpackRows",
    "SokLitePackRows",
    "SokLiteReduceForOwner",
    # test_dynamic_table_ops: every program creates a table, then calls the others on it.
    "SokLiteDynamicTable",
    "SokLiteDynamicLookup",
    "SokLiteDynamicLookupCombine",
    "SokLiteDynamicApply",
    "SokLiteDynamicExport",
    "SokLiteDynamicAssign",
    "SokLiteDynamicSize",
    "SokLiteDynamicEvict",
    "SokLiteDynamicClear",
    "SokLiteDynamicExportRange",
    "SokLiteDynamicMemoryStats",
}


def test_every_registered_op_is_fuzzed():
    from sok_lite._loader import ops

    def snake(name):
        return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()

    wrappers = {
        name
        for name in dir(ops())
        if name.startswith("sok_lite_") and not name.endswith("_eager_fallback")
    }
    assert wrappers == {snake(op) for op in FUZZED_OPS}


@pytest.mark.parametrize("finding", FINDINGS, ids=lambda f: f.name)
def test_known_finding_is_fixed(worker, finding):
    if finding.sanitizers_only and "libasan" not in os.environ.get("LD_PRELOAD", ""):
        pytest.xfail("shows only under scripts/run_sanitized_tests.sh")
    case = finding.reproduction
    if finding.must_reject:
        case = dataclasses.replace(case, invalid=finding.summary)
    run(worker, [case], skip_known=False)
