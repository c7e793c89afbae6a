"""benchmarks/soak.py runs end to end at a few hundred steps and reports every target.

Timing and memory figures at this length mean nothing: only the report's shape is checked."""

import json
import pathlib
import subprocess
import sys

SOAK = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"
TARGETS = {
    "rss_growth_below_5pct",
    "dynamic_rows_equal_keys_seen",
    "dynamic_memory_follows_rows",
    "step_time_within_10pct",
}


def test_soak_reports_every_target():
    args = ["--steps", "300", "--warmup", "50", "--window", "100", "--rss-every", "100"]
    proc = subprocess.run(
        [sys.executable, str(SOAK), *args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert set(result["targets"]) == TARGETS
    for name in TARGETS:
        assert any(line.split() in (["PASS", name], ["FAIL", name]) for line in lines), name
    assert result["steps"] == 300 and result["ranks"] == 1
    rank = result["per_rank"][0]
    assert rank["rss_warm_mib"] > 0 and rank["first_window_ms"] > 0
    assert rank["last_window_cpu_ms"] > 0
    assert [s for s, _ in rank["rss_samples_mib"]] == [100, 200, 300]
    # The table holds exactly the user keys looked up: a count, not a timing.
    assert result["dynamic_rows_end"] == result["dynamic_keys_seen_end"] > 0
