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


def test_small_tables_bench_runs_a_custom_loop(tmp_path):
    out = tmp_path / "custom.json"
    args = ["--epochs", "1", "--repeats", "1", "--loop", "custom", "--json", str(out)]
    proc = run_benchmark("small_tables_bench.py", *args)
    result = json.loads(out.read_text())
    assert result["loop"] == "custom"
    # One trace for the full batches, one for the last, shorter one; sok_lite's optimizer is
    # built outside the first trace, plain Keras' inside it, which then runs again.
    assert result["sok_lite"]["traces"] == [2] and result["plain_keras"]["traces"] == [3]
    assert "step traced 2 times" in proc.stdout and "custom loop" in proc.stdout
