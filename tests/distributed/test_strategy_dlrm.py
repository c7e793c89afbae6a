"""The DLRM example model trained under MirroredStrategy (2 logical CPUs) and
MultiWorkerMirroredStrategy (2 local worker processes) ends up with the same global tables and
dense weights as on one process without a strategy."""

import re

from tests.distributed.strategy_launcher import one_process_output, run_workers
from tests.distributed.trained_tables import assert_same_training

TABLES, DENSE = 26, 8  # the DLRM example's tables and dense weights


one_process_dlrm = one_process_output("strategy_dlrm_worker.py")


def test_dlrm_under_mirrored_strategy_matches_one_process(tmp_path, one_process_dlrm):
    run_workers("strategy_dlrm_worker.py", 0, str(tmp_path), "mirrored")
    assert_same_training(tmp_path, one_process_dlrm, num_ranks=2, tables=TABLES, dense=DENSE)


def test_dlrm_under_multi_worker_strategy_matches_one_process(tmp_path, one_process_dlrm):
    outputs = run_workers("strategy_dlrm_worker.py", 2, str(tmp_path), "multi_worker")
    assert len(list(tmp_path.glob("tables*.npz"))) == 2
    losses = [float(re.search(r"loss ([0-9.]+)", out).group(1)) for out in outputs]
    assert losses[0] == losses[1]
    assert_same_training(tmp_path, one_process_dlrm, num_ranks=2, tables=TABLES, dense=DENSE)
