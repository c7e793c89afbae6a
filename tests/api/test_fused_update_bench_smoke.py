"""benchmarks/fused_update_bench.py builds its native harness and runs both update paths on a
small table: the fused pass must end bit for bit equal to the two passes the op library runs
(timings at this size mean nothing: only the result's shape is checked)."""

import json
import os
import shutil

import pytest

from tests.common import run_benchmark

HAS_CXX = bool(os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++"))


@pytest.mark.skipif(not HAS_CXX, reason="needs a C++ compiler")
def test_fused_and_two_pass_updates_end_equal(tmp_path):
    out = tmp_path / "fused.json"
    run_benchmark("fused_update_bench.py", "--rows", "50000", "--steps", "3", "--json", str(out))
    results = json.loads(out.read_text())
    assert [r["optimizer"] for r in results] == ["sgd", "adagrad"]
    for r in results:
        assert r["same_bits"] is True, r
        assert r["rows"] == 50000 and 0 < r["distinct"] <= 163840
        assert r["unfused_ms"] > 0 and r["fused_ms"] > 0
