"""SOK_LITE_LOCK_TRACE=1 (kernels/tf/lock_trace.h) and benchmarks/lock_trace.py: a small
tiered_bench.py prefetch run traces every holder of the table's lock, the prefetch's read
beside them, and the summary adds them up; without the variable nothing is traced."""

import os
import pathlib

from tests.common import run_benchmark
from tests.module_from_file import module_from_file

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"
ARGS = ["prefetch", "--keys", "20000", "--sweep-batch", "2000", "--prefetch-fractions", "4"]
ARGS += ["--rounds", "1", "--prefetch-steps", "3", "--prefetch-warm", "1"]
ARGS += ["--prefetch-settle", "2", "--autotune", "off"]


def _run(tmp_path, trace):
    env = dict(os.environ)
    env.pop("SOK_LITE_LOCK_TRACE", None)
    if trace:
        env["SOK_LITE_LOCK_TRACE"] = "1"
    args = [*ARGS, "--dir", str(tmp_path), "--json", str(tmp_path / "out.json")]
    return run_benchmark("tiered_bench.py", *args, timeout=600, env=env)


def test_the_trace_lays_out_every_holder_and_sums_up(tmp_path):
    lock_trace = module_from_file(BENCHMARKS / "lock_trace.py", "lock_trace")
    events = lock_trace.parse(_run(tmp_path, True).stderr.splitlines())
    assert events
    for _, _, thread, asked, held, done in events:
        assert thread > 0 and asked <= held <= done
    summary = lock_trace.summarize(events)
    assert summary
    holders = set().union(*(s["holders"] for s in summary.values()))
    assert {"lookup", "update", "prefetch-plan", "prefetch-read", "prefetch-place"} <= holders
    for s in summary.values():
        assert 0 < s["busy"] <= 1
        for n, wait, hold in s["holders"].values():
            assert n > 0 and wait >= 0 and hold >= 0
    # A prefetched table's lookups: its step time is measured between them.
    assert any(s["step_ms"] > 0 and "prefetch-place" in s["holders"] for s in summary.values())


def test_without_the_variable_nothing_is_traced(tmp_path):
    assert "sok_lite lock:" not in _run(tmp_path, False).stderr
