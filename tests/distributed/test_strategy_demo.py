"""SOK's classic demo (examples/sok_classic_demo.py) under MirroredStrategy (2 logical CPUs) and
MultiWorkerMirroredStrategy (2 local worker processes): its loss decreases, step by step as on
one process."""

import json

import numpy as np
import pytest

from tests.distributed.strategy_launcher import run_workers

# Narrower dense layers than the demo's 1024 units, to keep the runs short.
DEMO_ARGS = ["--steps", "80", "--dense_units", "128", "--print_every", "10"]
# SOK sizes tables per rank: 2 ranks x 256 rows make the one process's 512-row table, and the
# demo draws its ids over the whole table, so every run sees the same global batches.
ROWS_PER_RANK_OF_TWO = ["--max_vocabulary_size_per_gpu", "256"]


def losses(out_dir, process=0):
    return json.loads((out_dir / f"losses{process}.json").read_text())


@pytest.fixture(scope="module")
def one_process_losses(tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    run_workers(
        "strategy_demo_worker.py", 0, str(out), *DEMO_ARGS, "--max_vocabulary_size_per_gpu", "512"
    )
    return losses(out)


def assert_trains_as_one_process(result, reference):
    assert len(result) == len(reference) == 80
    first, last = np.mean(result[:10]), np.mean(result[-10:])
    assert last < first - 0.1, result
    # The same global batches and initial weights: the same losses up to float32 summation
    # order, which 7 dense layers and 80 Adam steps amplify a little.
    np.testing.assert_allclose(result, reference, rtol=1e-3)


def test_classic_demo_under_mirrored_strategy(tmp_path, one_process_losses):
    args = [*DEMO_ARGS, *ROWS_PER_RANK_OF_TWO, "--distributed_tool", "mirrored"]
    run_workers("strategy_demo_worker.py", 0, str(tmp_path), *args)
    assert_trains_as_one_process(losses(tmp_path), one_process_losses)


def test_classic_demo_under_multi_worker_strategy(tmp_path, one_process_losses):
    args = [*DEMO_ARGS, *ROWS_PER_RANK_OF_TWO, "--distributed_tool", "multiworker"]
    run_workers("strategy_demo_worker.py", 2, str(tmp_path), *args)
    # The reported loss is the global one: the same on both workers.
    assert losses(tmp_path, 0) == losses(tmp_path, 1)
    assert_trains_as_one_process(losses(tmp_path), one_process_losses)
