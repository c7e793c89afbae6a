"""Fuzzes every registered SokLite* op through the raw op library with malformed inputs.

Each call must either succeed with outputs that pass a sanity check or raise
tf.errors.OpError, TypeError or ValueError; input the fuzzer knows to be malformed must raise.
The ops run in a child process (op_fuzz_worker.py), so a crash fails the test with the
input that caused it instead of killing pytest. The strategies are in op_fuzz_*_cases.py.

test_tiered_table_ops runs each dynamic-table program twice, on a table with a disk tier and a
budget of a few rows and on an all-RAM table, and holds the results of the first to the second.

SOK_LITE_FUZZ_EXAMPLES: examples per test (default 20; raise it for long campaigns).
SOK_LITE_FUZZ_KNOWN=0: skip inputs that trigger the (fixed) findings of op_fuzz_known.py;
their reproductions always run as regression tests.
"""

import dataclasses
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, reject, settings, target

from sok_lite.tables.table_kind import MEMORY_STATS
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


def run(worker: OpWorker, cases: list[Case], skip_known: bool = not INCLUDE_KNOWN) -> list[dict]:
    """Runs cases in order in the worker and fails the test on any finding; their results."""
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
    return results


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
@given(case=lookup.assign_table())
def test_assign_table(worker, case):
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


@fuzz
@given(pair=dynamic.tiered_program())
def test_tiered_table_ops(worker, pair):
    if not INCLUDE_KNOWN and any(known_finding(c) for c in pair.tiered + (pair.oracle or [])):
        reject()  # without one call, the two programs' tables would not end the same
    results = run(worker, pair.tiered, skip_known=False)
    event(_tier_outcome(results))
    stats = results[-1]
    if stats["status"] == "ok":  # long campaigns steer towards programs that spill more
        target(float(stats["outputs"][0]["value"][MEMORY_STATS.index("spills")]), label="spills")
    if pair.oracle is not None:
        compare_with_oracle(pair, results, run(worker, pair.oracle, skip_known=False))


def test_tier_budgets_spill_and_refuse_as_the_fuzzer_expects(worker):
    # tier_budget models what the kernel charges to ram_budget: when the tier's accounting
    # changes, this fails (and test_tiered_table_ops would quietly stop spilling) until the model
    # follows.
    def lookups(budget, *key_ranges):
        table = {"resource": "table", "name": "t", "dim": 8, "init_kind": "constant", "seed": 0}
        table |= {"init_a": 0.5, "init_b": 0.0, "tier_path": dynamic.FRESH_DIR}
        table["ram_budget"] = budget
        cases = [
            Case("sok_lite_dynamic_lookup", {"table": table, "keys": np.arange(*r), "dim": 8})
            for r in key_ranges
        ]
        cases.append(Case("sok_lite_dynamic_memory_stats", {"table": table}))
        results = run(worker, cases, skip_known=False)
        stats = results[-1]["outputs"][0]["value"] if results[-1]["status"] == "ok" else ()
        return [r.get("message", "") for r in results[:-1]], dict(zip(MEMORY_STATS, stats))

    # A batch the budget cannot hold fails with the message the comparison expects.
    one_row = dynamic.tier_budget(8, "float32", 0, ram_rows=1, disk_rows=0)
    assert BUDGET_ERROR in lookups(one_row, (0, 7))[0][0]
    # RAM for a batch and an index for every row that goes to disk: batches keep fitting while
    # rows spill and come back.
    messages, stats = lookups(
        dynamic.tier_budget(8, "float32", 0, ram_rows=6, disk_rows=24),
        *[(0, 6), (6, 12), (12, 18), (0, 6), (18, 24), (6, 12)],
    )
    assert messages == [""] * 6 and stats["rows_disk"] > 0 and stats["misses"] > 0, stats


def _tier_outcome(results: list[dict]) -> str:
    """What the disk tier did in a program (hypothesis statistics)."""
    if any(BUDGET_ERROR in r.get("message", "") for r in results):
        return "a call needed more RAM than the budget"
    stats = results[-1]
    if stats["status"] != "ok":
        return "the table was refused"
    spills = int(stats["outputs"][0]["value"][MEMORY_STATS.index("spills")])
    return "rows spilled to disk" if spills else "every row stayed in RAM"


BUDGET_ERROR = "raise ram_budget"


def compare_with_oracle(pair, results: list[dict], expected: list[dict]) -> None:
    """Fails the test where the tiered table's results differ from the all-RAM table's.

    Until a call fails for lack of budget (an expected refusal, after which the tables differ),
    each call must succeed or fail on both, with equal outputs: the same values bit for bit
    (the tier only moves records), the same rows in any order, the same row counts.
    """
    listing = "\n".join(repr(c) for c in pair.tiered)
    for case, got, want in zip(pair.tiered, results, expected):
        if BUDGET_ERROR in got.get("message", ""):
            return
        where = f"\n{case!r}\nin the program:\n{listing}"
        if got["status"] != want["status"]:
            pytest.fail(
                f"the tiered table {got['status']} ({got.get('message', '')}), the all-RAM "
                f"table {want['status']} ({want.get('message', '')}):{where}",
                pytrace=False,
            )
        if got["status"] == "ok":
            problem = _output_difference(case.op, got["outputs"], want["outputs"])
            if problem:
                pytest.fail(f"tiered and all-RAM tables differ: {problem}{where}", pytrace=False)


def _bits(value: np.ndarray) -> np.ndarray:
    return value.view(f"u{value.itemsize}") if value.dtype.kind == "f" else value


def _output_difference(op: str, got: list[dict], want: list[dict]) -> str:
    op = op.removeprefix("sok_lite_dynamic_")
    if op in ("export_range", "clear", "apply", "assign", "swap_rows", "prefetch"):
        # A range's cursor counts positions, which differ between the tiers; a prefetch
        # counts the rows it read back from disk.
        return ""
    values = [o["value"] for o in got], [o["value"] for o in want]
    if op == "memory_stats":
        (a,), (b,) = values
        # Only what the tier does not change: rows in both tiers, and evictions.
        ram, disk = MEMORY_STATS.index("rows_ram"), MEMORY_STATS.index("rows_disk")
        evictions = MEMORY_STATS.index("evictions")
        if a[ram] + a[disk] != b[ram] + b[disk] or a[evictions] != b[evictions]:
            return f"memory_stats {a.tolist()} against {b.tolist()}"
        return ""
    if op == "export":
        (ka, ra), (kb, rb) = values
        oa, ob = np.argsort(ka, kind="stable"), np.argsort(kb, kind="stable")
        values = [ka[oa], ra[oa]], [kb[ob], rb[ob]]
    for a, b in zip(*values):
        if a.shape != b.shape or not np.array_equal(_bits(a), _bits(b)):
            return f"{op} returned\n{a!r}\nthe all-RAM table\n{b!r}"
    return ""


FUZZED_OPS = {
    "SokLiteRowSplitsFromRowIds",
    "SokLiteUniqueIds",
    "SokLiteGatherRows",
    "SokLiteSegmentCombine",
    "SokLiteSegmentCombineGrad",
    "SokLiteInitRows",
    "SokLiteAssignTable",
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
    "SokLiteDynamicSwapRows",
    "SokLiteDynamicExportRange",
    "SokLiteDynamicMemoryStats",
    "SokLiteDynamicPrefetch",
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
