"""benchmarks/page_cache_bench.py builds its native harness and moves records every way it
measures on a small file: each read must return the records asked for (every record starts with
its slot number), and each measure must report a time (timings at this size mean nothing)."""

import json
import os
import shutil

import pytest

from tests.common import run_benchmark

HAS_CXX = bool(os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++"))


@pytest.mark.skipif(not HAS_CXX, reason="needs a C++ compiler")
def test_every_way_moves_the_records_asked_for(tmp_path):
    out = tmp_path / "page_cache.json"
    args = ["--records", "20000", "--batch", "1500", "--reps", "2", "--dir", str(tmp_path)]
    run_benchmark("page_cache_bench.py", *args, "--json", str(out))
    results = {r["what"]: r for r in json.loads(out.read_text())["results"]}
    assert set(results) == {
        "pread",
        "pread_cached",
        "io_uring",
        "mmap",
        "pwrite_random",
        "pwrite_append",
    }
    for name, r in results.items():
        if name == "io_uring" and not r["available"]:
            continue  # a kernel or sandbox without it
        assert r["available"] and r["mismatches"] == 0, r
        assert r["us_per_record"] > 0 and r["cpu_us_per_record"] >= 0, r
    assert not list(tmp_path.glob("tmp*/records.bin"))  # the file is gone
