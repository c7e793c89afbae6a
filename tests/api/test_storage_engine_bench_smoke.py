"""benchmarks/storage_engine_bench.py on a tiny table: both engines return the records they
were given (a NumPy reference), and the script runs end to end. Timings at this size mean
nothing: only the output's shape is checked. LMDB parts skip when `lmdb` is not installed."""

import importlib.util
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from tests.module_from_file import module_from_file

BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "storage_engine_bench.py"
HAS_LMDB = importlib.util.find_spec("lmdb") is not None


@pytest.fixture(scope="module")
def bench():
    return module_from_file(BENCH, "storage_engine_bench")


def engines(bench, tmp_path, rows):
    yield bench.ChunkFile(str(tmp_path), rows, threads=3)
    if HAS_LMDB:
        yield bench.Lmdb(str(tmp_path), rows)


def test_records_written_back_are_read_back(bench, tmp_path):
    rows = 3000
    rng = np.random.default_rng(1)
    # Isolated keys and a run of consecutive ones, in shuffled order.
    keys = np.unique(np.concatenate([rng.integers(0, rows, 700), np.arange(100, 140)]))
    keys = rng.permutation(keys)
    for engine in engines(bench, tmp_path, rows):
        try:
            first = engine.read(keys)
            expected = bench.initial_records(np.sort(keys))
            np.testing.assert_array_equal(np.sort(first, order="key"), expected)
            changed = first.copy()
            changed["row"] += rng.standard_normal(changed["row"].shape).astype(np.float32)
            changed["meta"][:, 1] = 7
            engine.write(changed)
            engine.sync()
            engine.drop_cache()
            again = np.sort(engine.read(keys), order="key")
            np.testing.assert_array_equal(again, np.sort(changed, order="key"), engine.name)
            untouched = np.setdiff1d(np.arange(rows), keys)[:50]
            np.testing.assert_array_equal(engine.read(untouched), bench.initial_records(untouched))
            # Records that were not the last read's: written on their own.
            fresh = bench.initial_records(np.array([5, 6, 2999, 1500]))
            fresh["meta"][:, 0] = 3
            engine.write(fresh)
            got = np.sort(engine.read(np.array([2999, 1500, 5, 6, 7])), order="key")
            expected = np.concatenate([fresh, bench.initial_records(np.array([7]))])
            assert np.array_equal(got, np.sort(expected, order="key")), engine.name
        finally:
            engine.close()


def test_ram_tier_keeps_the_most_recently_seen_keys(bench):
    tier = bench.RamTier(rows=10, budget=3)
    np.testing.assert_array_equal(tier.step(np.array([1, 2, 3]), 0), [1, 2, 3])
    np.testing.assert_array_equal(tier.step(np.array([3, 4]), 1), [4])  # 1 or 2 leaves
    np.testing.assert_array_equal(tier.step(np.array([3, 4]), 2), [])
    assert tier.resident.sum() == 3 and tier.resident[[3, 4]].all()


def test_bench_runs_end_to_end(tmp_path):
    engines_arg = "chunk,lmdb" if HAS_LMDB else "chunk"
    args = ["--rows", "4000", "--warmup", "1", "--steps", "1", "--raw-seconds", "0.2"]
    proc = subprocess.run(
        [sys.executable, str(BENCH), *args, "--engines", engines_arg, "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert out.count("rows/s (read+write)") == (4 if HAS_LMDB else 2), out
    assert "random 4 KiB reads/s at queue depth 1" in out
    if HAS_LMDB:
        assert "uniform: chunk file / LMDB = " in out
    assert list(tmp_path.iterdir()) == []  # the files are removed


@pytest.mark.skipif(not HAS_LMDB, reason="lmdb is not installed (pip install lmdb)")
def test_lmdb_keys_sort_numerically(bench):
    keys = bench.Lmdb._keys(np.array([256, 1, 255, 0], np.int64))
    assert keys == sorted(keys) and len(keys[0]) == 8
