"""benchmarks/tiered_bench.py sweep, prefetch, zipf and rss at a small size: the sweep writes its
JSON, with the measured hit rate beside the plan's prediction and an infeasible budget recorded
with the plan's reason; prefetch writes all-RAM, tiered and prefetched figures per budget, and
with --prefetch-beside the step alone and beside a prefetch reading from the disk; zipf reports
the CPU and bytes a missed id costs; rss runs the same steps on a tiered and an all-RAM table
(timings and RSS at this size mean nothing: only the results' shape and hit rates are checked)."""

import json
import pathlib

from tests.common import run_benchmark
from tests.module_from_file import module_from_file

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


def test_tiered_sweep_writes_measured_and_predicted_hit_rates(tmp_path):
    out = tmp_path / "sweep.json"
    args = ["sweep", "--keys", "30000", "--sweep-batch", "3000", "--sweep-exponents", "1.1"]
    args += ["--sweep-fractions", "3,40", "--rounds", "1", "--iters", "10", "--dir", str(tmp_path)]
    proc = run_benchmark("tiered_bench.py", *args, "--json", str(out), timeout=600)
    assert "prefetch: off" in proc.stdout
    result = json.loads(out.read_text())
    assert result["benchmark"] == "tiered_sweep" and result["keys"] == 30_000
    feasible, infeasible = result["points"]
    # 18 steps of 3,000 ids: sampling noise of the measured rate is ~0.01.
    assert abs(feasible["hit_rate"] - feasible["predicted_hit_rate"]) < 0.04, feasible
    assert feasible["ram_ms"] > 0 and feasible["ratio"] > 0
    assert not infeasible["feasible"] and "keeps 0" in infeasible["reason"]


def test_tiered_prefetch_writes_three_variants_per_budget(tmp_path):
    out = tmp_path / "prefetch.json"
    args = ["prefetch", "--keys", "30000", "--sweep-batch", "3000", "--prefetch-fractions", "4"]
    args += [
        "--rounds",
        "1",
        "--prefetch-steps",
        "3",
        "--prefetch-warm",
        "1",
        "--prefetch-settle",
        "3",
        "--autotune",
        "off",
        "--dir",
        str(tmp_path),
    ]
    proc = run_benchmark("tiered_bench.py", *args, "--json", str(out), timeout=600)
    assert "transparent huge pages" in proc.stdout and "autotuning off" in proc.stdout
    result = json.loads(out.read_text())
    (point,) = result["points"]
    assert result["autotune"] == "off"
    assert point["ram"]["hit_rate"] == 1.0
    assert point["prefetch"]["hit_rate"] > point["tiered"]["hit_rate"], point
    for variant in ("tiered", "prefetch"):
        assert 1 <= point[variant + "_settle_calls"] <= 3, point
        assert point[variant]["bytes_disk"] > 0
    for variant in ("ram", "tiered", "prefetch"):
        v = point[variant]
        assert v["ms_per_step"] > 0 and v["cpu_ms_per_step"] > 0, v
        assert v["machine_cpu_ms_per_step"] > 0 and len(v["rounds_ms"]) == 1, v


def test_tiered_prefetch_beside_times_the_step_with_and_without_a_prefetch(tmp_path):
    out = tmp_path / "beside.json"
    args = ["prefetch", "--prefetch-beside", "--keys", "30000", "--sweep-batch", "3000"]
    args += ["--prefetch-fractions", "4", "--rounds", "1", "--prefetch-steps", "2"]
    run_benchmark("tiered_bench.py", *args, "--dir", str(tmp_path), "--json", str(out), timeout=600)
    result = json.loads(out.read_text())
    assert result["benchmark"] == "tiered_prefetch_beside", result
    (point,) = result["points"]
    assert point["fraction"] == 0.25 and point["rows_read"] > 0, point
    assert min(point["alone_ms"], point["beside_ms"], point["prefetch_ms"]) > 0, point


def test_tiered_zipf_reports_cpu_and_bytes_per_miss(tmp_path):
    out = tmp_path / "zipf.json"
    # A batch's new keys (200,000 while the table fills) must fit the budget beside the index.
    args = ["zipf", "--keys", "1000000", "--dim", "8", "--budget", "48MiB", "--rounds", "1"]
    args += ["--iters", "3", "--dir", str(tmp_path), "--json", str(out)]
    proc = run_benchmark("tiered_bench.py", *args, timeout=600)
    assert "per missed id" in proc.stdout and "TF CPU allocator" in proc.stdout
    zipf = json.loads(out.read_text())["zipf"]
    assert 0 < zipf["hit_rate"] < 1, zipf
    # Every missed row is read back and as many spilled: bytes both ways through the tier file.
    assert zipf["per_miss"]["read_bytes"] > 0 and zipf["per_miss"]["written_bytes"] > 0, zipf


def test_tiered_rss_runs_the_same_steps_on_a_tiered_and_an_all_ram_table(tmp_path):
    out = tmp_path / "rss.json"
    args = ["rss", "--budget", "4MiB", "--fill", "2", "--batch", "4096", "--rss-steps", "3"]
    proc = run_benchmark("tiered_bench.py", *args, "--dir", str(tmp_path), "--json", str(out))
    assert "followed by sok.prefetch" in proc.stdout
    rss = json.loads(out.read_text())["rss"]
    full, ram = rss["full"], rss["ram"]
    assert full["keys"] == ram["keys"] > 0 and len(full["zipf"]) == len(ram["zipf"]) == 3
    assert full["stats"]["bytes_disk"] > 0 and full["stats"]["misses"] > 0, full["stats"]
    assert ram["stats"]["bytes_disk"] == 0 and rss["tf_own"] > 0 and rss["settled"] > 0, rss


class _ScriptedTable:
    """memory_stats() of a table whose tier file and spills follow a script, one entry a call
    of run()."""

    def __init__(self, sizes, spills):
        self.script = list(zip(sizes, spills))
        self.calls = 0

    def run(self):
        self.calls += 1

    def memory_stats(self):
        size, spills = self.script[min(self.calls, len(self.script) - 1)]
        return {"bytes_disk": size, "spills": spills}


def test_settling_waits_for_the_file_and_for_the_spills_to_stop_falling():
    sweep = module_from_file(BENCHMARKS / "tiered_sweep.py", "tiered_sweep_settle")
    settle = sweep.settle_tier_file
    # The file grows through call 3 and not after, spills 100 a call from the start: settled at
    # call 6, the first with two windows of three calls behind it.
    steady = _ScriptedTable([1, 2, 3] + [4] * 20, [100 * c for c in range(23)])
    assert settle(steady, steady.run, 40) == 6 == steady.calls
    # Spills falling a call (LFU's counts still ranking the keys) keep it going until a window
    # spills at least 97% of the one before: 1000, 900, ... a call, level at 300 from call 8 on,
    # so calls 8-10 and 11-13 are the first two level windows.
    per_call = [max(1000 - 100 * c, 300) for c in range(40)]
    falling = _ScriptedTable([4] * 41, [sum(per_call[:c]) for c in range(41)])
    assert settle(falling, falling.run, 40) == 13
    # Never more than max_calls.
    growing = _ScriptedTable(list(range(50)), [0] * 50)
    assert settle(growing, growing.run, 5) == 5
