"""The failed-calls suite (tests/robustness) on 2 Horovod ranks: each rank's state after a
failed call equals its state before."""

from tests.distributed.launcher import launch, read_reports
from tests.robustness.failure_registry import failures_on_every_rank
from tests.robustness.worlds import KINDS


def test_failed_calls_change_nothing_on_two_ranks(tmp_path):
    code, output = launch("failed_calls_worker.py", 2, tmp_path, str(tmp_path), timeout=600)
    assert code == 0, output[-5000:]
    # One check for each failure that applies to each table kind.
    checks = sum(kind in f.kinds for kind in KINDS for _, f in failures_on_every_rank())
    assert checks >= 78  # the registry's failures at the time of writing, at least
    read_reports("failed_calls_worker.py", 2, tmp_path, checks=checks, output=output)
