"""benchmarks/small_tables_bench.py runs both sides once and writes its JSON (timings at this
length mean nothing: only the result's shape is checked)."""

import json

from tests.common import run_benchmark


def test_small_tables_bench_runs_both_sides(tmp_path):
    out = tmp_path / "small.json"
    args = ["--epochs", "1", "--repeats", "1", "--json", str(out)]
    proc = run_benchmark("small_tables_bench.py", *args)
    result = json.loads(out.read_text())
    for side in ("plain_keras", "sok_lite"):
        assert 0 < result[side]["median_first_step_s"] < result[side]["median_total_s"]
    assert result["ratio_median"] > 0
    assert "plain Keras / sok_lite" in proc.stdout and "transparent huge pages" in proc.stdout
