"""sok_lite.Variable and DynamicVariable trained with lookup_sparse + OptimizerScope under
MirroredStrategy (2 logical CPUs, one shard per replica) end up as on one process."""

import json

import numpy as np

from tests.distributed.strategy_launcher import run_workers


def train(out_dir, kind: str, *extra: str) -> dict:
    run_workers("strategy_tables_worker.py", 0, str(out_dir), kind, *extra)
    with np.load(out_dir / "tables.npz") as saved:
        return {key: saved[key] for key in saved.files}


def test_tables_under_mirrored_strategy_match_one_process(tmp_path):
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one, two = train(tmp_path / "one", "single"), train(tmp_path / "two", "mirrored")

    # Static table: row i on rank i % 2, each replica holding its own shard.
    expected = one["static@0"]
    assert len(two["static@0"]) == 12 and len(two["static@1"]) == 11
    table = np.zeros_like(expected)
    table[0::2], table[1::2] = two["static@0"], two["static@1"]
    np.testing.assert_allclose(table, expected, rtol=1e-5, atol=1e-7)

    # Hash table: every key stored once, on one replica, with the same row.
    rows = dict(zip(one["keys@0"].tolist(), one["values@0"]))
    keys = [two["keys@0"].tolist(), two["keys@1"].tolist()]
    assert keys[0] and keys[1] and not set(keys[0]) & set(keys[1])
    assert sorted(keys[0] + keys[1]) == sorted(rows)
    for r in (0, 1):
        for key, row in zip(keys[r], two[f"values@{r}"]):
            np.testing.assert_allclose(row, rows[key], rtol=1e-5, atol=1e-7, err_msg=str(key))


def test_tiered_hash_table_under_mirrored_strategy_matches_ram_on_one_process(tmp_path):
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one, two = train(tmp_path / "one", "single"), train(tmp_path / "two", "mirrored", "disk")
    # Each replica (rank) had its own tier directory, removed with the tables at exit.
    tiers = json.loads((tmp_path / "two" / "tiers.json").read_text())
    assert tiers == [f"tier/dynamic.rank{r}/rows.bin" for r in (0, 1)]
    assert list((tmp_path / "two" / "tier").iterdir()) == []
    rows = dict(zip(one["keys@0"].tolist(), one["values@0"]))
    keys = [two["keys@0"].tolist(), two["keys@1"].tolist()]
    assert sorted(keys[0] + keys[1]) == sorted(rows)
    for r in (0, 1):
        for key, row in zip(keys[r], two[f"values@{r}"]):
            np.testing.assert_allclose(row, rows[key], rtol=1e-5, atol=1e-7, err_msg=str(key))
