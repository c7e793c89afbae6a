"""lookup_sparse under MultiWorkerMirroredStrategy: 2 local worker processes on loopback ports."""

from tests.distributed.launcher import read_reports

# free_ports stays importable from here for tests written against this module.
from tests.distributed.strategy_launcher import free_ports, run_workers  # noqa: F401

CHECKS = 3 * 4  # each worker checks each table of each of its 3 batches


def test_multi_worker_lookup_matches_single_process(tmp_path):
    run_workers("strategy_worker.py", 2, str(tmp_path))
    for report in read_reports("strategy_worker.py", 2, tmp_path, checks=CHECKS):
        assert report["num_ranks"] == 2
