"""The DLRM example model trained under MirroredStrategy (2 logical CPUs) and
MultiWorkerMirroredStrategy (2 local worker processes) ends up with the same global tables and
dense weights as on one process without a strategy."""

import re

import numpy as np
import pytest

from tests.distributed.strategy_launcher import run_workers


def global_tables(out_dir, num_ranks: int) -> dict[str, np.ndarray]:
    """Each table assembled from the shards every process wrote (row i on rank i % N)."""
    shards: dict[str, dict[int, np.ndarray]] = {}
    for path in sorted(out_dir.glob("tables*.npz")):
        with np.load(path) as saved:
            for key in saved.files:
                name, rank = key.split("@")
                shards.setdefault(name, {})[int(rank)] = saved[key]
    tables = {}
    for name, parts in shards.items():
        n = num_ranks
        assert sorted(parts) == list(range(n)), f"table {name}: shards of ranks {sorted(parts)}"
        rows = sum(len(p) for p in parts.values())
        table = np.zeros((rows, parts[0].shape[1]), parts[0].dtype)
        for rank, part in parts.items():
            table[rank::n] = part
        tables[name] = table
    return tables


@pytest.fixture(scope="module")
def one_process_dlrm(tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    run_workers("strategy_dlrm_worker.py", 0, str(out), "single")
    return out


def assert_same_training(out, reference, num_ranks):
    tables, expected = global_tables(out, num_ranks), global_tables(reference, 1)
    assert sorted(tables) == sorted(expected) and len(tables) == 26
    for name in expected:
        # Same global batches, so the same rows up to float32 summation order; atol covers
        # entries that Adam left near zero. The worker trains only a few steps: Adam lets the
        # round-off grow with every step (after 20 steps it came within 2x of atol), while a
        # sok_lite error moves a row by the size of an Adam step (1e-2) or more.
        np.testing.assert_allclose(
            tables[name], expected[name], rtol=1e-4, atol=1e-6, err_msg=f"table {name}"
        )
    with np.load(out / "dense0.npz") as dense, np.load(reference / "dense0.npz") as ref:
        assert len(dense.files) == len(ref.files) > 0
        for key in ref.files:
            np.testing.assert_allclose(dense[key], ref[key], rtol=1e-4, atol=1e-6, err_msg=key)


def test_dlrm_under_mirrored_strategy_matches_one_process(tmp_path, one_process_dlrm):
    run_workers("strategy_dlrm_worker.py", 0, str(tmp_path), "mirrored")
    assert_same_training(tmp_path, one_process_dlrm, num_ranks=2)


def test_dlrm_under_multi_worker_strategy_matches_one_process(tmp_path, one_process_dlrm):
    outputs = run_workers("strategy_dlrm_worker.py", 2, str(tmp_path), "multi_worker")
    assert len(list(tmp_path.glob("tables*.npz"))) == 2
    losses = [float(re.search(r"loss ([0-9.]+)", out).group(1)) for out in outputs]
    assert losses[0] == losses[1]
    assert_same_training(tmp_path, one_process_dlrm, num_ranks=2)
