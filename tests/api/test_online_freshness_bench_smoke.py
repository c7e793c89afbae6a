"""benchmarks/online_freshness_bench.py trains a tiny DLRM for a few seconds while its server
process (without sok_lite) applies the deltas, and writes its JSON (timings at this length mean
nothing: only the result's shape is checked)."""

import json

from tests.common import run_benchmark


def test_online_freshness_bench_serves_every_delta(tmp_path):
    out = tmp_path / "freshness.json"
    args = ["--scale", "0.0001", "--batch", "256", "--distinct-batches", "4", "--seconds", "2"]
    args += ["--delta-seconds", "1", "--idle-seconds", "0.2", "--json", str(out)]
    run_benchmark("online_freshness_bench.py", *args)
    result = json.loads(out.read_text())
    deltas = result["deltas"]
    assert [d["sequence"] for d in deltas] == list(range(1, len(deltas) + 1))
    assert sum(d["steps"] for d in deltas) == result["training"]["steps"]
    assert all(d["rows"] > 0 and d["apply_to_served_s"] >= 0 for d in deltas)
    assert result["freshness_s"]["events"] == sum(d["events"] for d in deltas) > 0
    assert result["failed_requests"] == 0
    assert result["latency_ms"]["idle"]["count"] > 0
    assert result["settings"]["scale"] == 0.0001 and result["settings"]["cpu_cores"] > 0
