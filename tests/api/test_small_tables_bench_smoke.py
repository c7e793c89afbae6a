"""benchmarks/small_tables_bench.py runs both sides and the floor once and writes its JSON
(timings at this length mean nothing: only the result's shape is checked)."""

import json

from tests.common import run_benchmark


def test_small_tables_bench_runs_both_sides(tmp_path):
    out = tmp_path / "small.json"
    args = ["--epochs", "1", "--repeats", "1", "--autotune", "off", "--json", str(out)]
    proc = run_benchmark("small_tables_bench.py", *args)
    result = json.loads(out.read_text())
    for side in ("plain_keras", "sok_lite", "floor"):
        assert 0 < result[side]["median_first_step_s"] < result[side]["median_total_s"]
    assert result["ratio_median"] > 0 and result["floor_ratio_median"] > 0
    assert result["autotune"] == "off"
    lines = ("plain Keras / sok_lite", "plain Keras / floor", "transparent huge pages")
    for line in (*lines, "tf.data autotuning off"):
        assert line in proc.stdout
