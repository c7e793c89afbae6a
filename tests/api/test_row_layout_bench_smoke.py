"""benchmarks/row_layout_bench.py builds its native harness and runs Adam on both layouts of a
small table: the records must end bit for bit equal to the three arrays (timings at this size
mean nothing: only the result's shape is checked)."""

import json
import os
import shutil

import pytest

from tests.common import run_benchmark

HAS_CXX = bool(os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++"))


@pytest.mark.skipif(not HAS_CXX, reason="needs a C++ compiler")
def test_records_and_three_arrays_end_equal(tmp_path):
    out = tmp_path / "layout.json"
    run_benchmark("row_layout_bench.py", "--rows", "50000", "--steps", "4", "--json", str(out))
    (r,) = json.loads(out.read_text())
    assert r["same_bits"] is True, r
    assert r["rows"] == 50000 and 0 < r["distinct"] <= 26 * 4096
    for key in ("arrays_ms", "records_ms", "track_ms", "track_prefetched_ms"):
        assert r[key] > 0, r
