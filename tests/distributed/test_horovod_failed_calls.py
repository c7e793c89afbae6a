"""The failed-calls suite (tests/robustness) on 2 Horovod ranks: each rank's state after a
failed call equals its state before."""

import json

from tests.distributed.launcher import launch


def test_failed_calls_change_nothing_on_two_ranks(tmp_path):
    code, output = launch("failed_calls_worker.py", 2, tmp_path, str(tmp_path), timeout=600)
    assert code == 0, output[-5000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert reports[0]["checks"] == reports[1]["checks"] > 40, (
        reports
    )  # every kind: ~17 failures each
