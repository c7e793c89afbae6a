"""lookup_sparse under MultiWorkerMirroredStrategy: 2 local worker processes on loopback ports."""

import json

# free_ports stays importable from here for tests written against this module.
from tests.distributed.strategy_launcher import free_ports, run_workers  # noqa: F401


def test_multi_worker_lookup_matches_single_process(tmp_path):
    run_workers("strategy_worker.py", 2, str(tmp_path))
    for index in range(2):
        report = json.loads((tmp_path / f"rank{index}.json").read_text())
        assert report["checks"] > 0 and report["num_ranks"] == 2
