"""A failed call changes nothing: for every public stateful call (failure_registry.py) and every
table kind, the rows, slots, counters, optimizer step and files after the failure equal, bit for
bit, those before it."""

import inspect

import pytest

import sok_lite as sok
from tests.robustness.failure_registry import ALIASES, FAILURES, STATELESS
from tests.robustness.worlds import KINDS, assert_unchanged, make_world, snapshot

CASES = [
    pytest.param(call, failure, kind, id=f"{call}-{failure.name}-{kind}")
    for call, failures in FAILURES.items()
    for failure in failures
    for kind in KINDS
    if kind in failure.kinds
]


@pytest.mark.parametrize("call, failure, kind", CASES)
def test_a_failed_call_changes_nothing(tmp_path, call, failure, kind):
    world = make_world(kind, tmp_path)
    prepared = failure.setup(world)
    before = snapshot(world)
    with pytest.raises(failure.error, match=failure.match):
        failure.call(world, prepared)
    assert_unchanged(before, snapshot(world), f"{call} ({failure.name}, {kind} table)")


def public_stateful_candidates() -> set:
    """sok_lite's public names, and the public methods sok_lite defines on its tables."""
    names = set(sok.__all__)
    for cls in (sok.Variable, sok.DynamicVariable):
        # The public class is assembled from mixins (sok.DynamicVariable's own body is empty):
        # every sok_lite class it inherits from counts, TensorFlow's and Keras' bases do not.
        for base in cls.__mro__:
            if not base.__module__.startswith("sok_lite"):
                continue
            for name, member in vars(base).items():
                if not name.startswith("_") and inspect.isfunction(member):
                    names.add(f"{cls.__name__}.{name}")
    return names


# Methods of the tables that other modules call (TableKind), not users; and reads.
TABLE_INTERNALS = {
    "apply_rows": "OptimizerScope/OptimizerWrapper.apply_gradients",
    "assign_rows": "SOK's sok.assign: Variable.assign",
    "checkpoint_chunks": "dump",
    "checkpoint_meta": "dump",
    "checkpoint_restore": "load",
    "checkpoint_stage": "load",
    "combines_in_place": "lookup_sparse",
    "export_rows": "a read",
    "gradient_rows": "lookup_sparse's gradient",
    "held_ids": "a read",
    "local_ids": "a read",
    "lookup_combine": "lookup_sparse",
    "owners": "a read",
    "read_local": "lookup_sparse",
    "serving_layout": "export_saved_model",
    "slot_variable": "OptimizerScope",
    "slot_variables": "OptimizerScope",
    "memory_stats": "a read",
    "export": "a read",
    "size": "a read",
    "sparse_read": "a lookup: lookup_sparse's cases",
    "gather_nd": "a lookup: lookup_sparse's cases",
    "value": "refused for a hash table",
    "read_value": "refused for a hash table",
    "key_map": "a read",
}


def test_every_public_call_is_classified():
    unclassified = []
    for name in sorted(public_stateful_candidates()):
        method = name.split(".")[-1]
        if name in FAILURES or name in STATELESS or name in ALIASES:
            continue
        if "." in name and (method in TABLE_INTERNALS or f"Variable.{method}" in FAILURES):
            continue
        if "." in name and f"DynamicVariable.{method}" in FAILURES:
            continue
        unclassified.append(name)
    assert not unclassified, (
        f"public calls with no failure cases registered: {unclassified}: add them to "
        "tests/robustness/failure_registry.py (FAILURES, or STATELESS with the reason)"
    )


def test_every_registered_call_has_failures():
    empty = [call for call, failures in FAILURES.items() if not failures]
    from tests.robustness import test_failed_keras_calls

    empty = [c for c in empty if c not in test_failed_keras_calls.REGISTERED]
    assert not empty, f"registered calls without failure cases: {empty}"
