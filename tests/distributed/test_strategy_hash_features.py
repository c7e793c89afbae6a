"""A Keras model with hash-table features trained under MirroredStrategy (2 logical CPUs, fit)
and MultiWorkerMirroredStrategy (2 local worker processes, a step loop) ends up with the same
table rows and dense weights as on one process without a strategy."""

from tests.distributed.strategy_launcher import one_process_output, run_workers
from tests.distributed.trained_tables import assert_same_training

TABLES = 3  # the model's tables

one_process = one_process_output("strategy_hash_features_worker.py")


def test_mirrored_strategy_fit_matches_one_process(tmp_path, one_process):
    run_workers("strategy_hash_features_worker.py", 0, str(tmp_path), "mirrored")
    assert_same_training(tmp_path, one_process, num_ranks=2, tables=TABLES, dense=4)


def test_multi_worker_strategy_matches_one_process(tmp_path, one_process):
    outputs = run_workers("strategy_hash_features_worker.py", 2, str(tmp_path), "multi_worker")
    assert all("iterations 3" in out for out in outputs)
    assert len(list(tmp_path.glob("tables*.npz"))) == 2
    assert_same_training(tmp_path, one_process, num_ranks=2, tables=TABLES, dense=4)
