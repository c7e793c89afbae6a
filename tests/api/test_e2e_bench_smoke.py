"""benchmarks/e2e_bench.py runs all four models end to end on tiny tables and writes its JSON.

Timings at this size mean nothing: only the result's shape is checked."""

import json

from tests.common import run_benchmark

MODELS = {"plain_keras", "sok_lite_static", "sok_lite_dynamic", "floor"}


def run_bench(tmp_path, *extra):
    out = tmp_path / "e2e.json"
    args = ["--scale", "0.0001", "--features", "3", "--batch", "64", "--rounds", "1"]
    args += ["--block-seconds", "0.05", "--min-steps", "2", "--distinct-batches", "4"]
    proc = run_benchmark("e2e_bench.py", *args, *extra, "--json", str(out))
    return json.loads(out.read_text()), proc.stdout


def test_e2e_bench_times_every_model(tmp_path):
    result, stdout = run_bench(tmp_path)
    assert set(result["models"]) == MODELS
    assert all(m["step_ms"] > 0 and m["samples_per_s"] > 0 for m in result["models"].values())
    assert all(len(m["block_ms"]) == 1 for m in result["models"].values())  # one per round
    assert result["models"]["floor"]["over_floor"] == 1.0
    assert result["features"] == 3 and result["batch"] == 64 and result["autotune"] == "on"
    assert "speed-up of sok_lite_static over plain Keras" in stdout
    assert "transparent huge pages: " in stdout and "update: unfused" in stdout


def test_e2e_bench_ragged_multi_hot_one_table_kind_no_autotuning(tmp_path):
    result, stdout = run_bench(
        tmp_path,
        "--multi-hot",
        "4",
        "--tables",
        "dynamic",
        "--autotune",
        "off",
        "--warm-steps",
        "4",
    )
    assert set(result["models"]) == MODELS - {"sok_lite_static"}
    assert result["multi_hot"] == 4 and result["multi_hot_input"] == "ragged"
    assert result["autotune"] == "off" and "tf.data autotuning off" in stdout
    assert result["warm_steps"] == 4


def test_e2e_bench_deeprec_model_under_mixed_precision(tmp_path):
    result, stdout = run_bench(
        tmp_path, "--model", "deeprec-dlrm", "--precisions", "float32", "mixed_bfloat16"
    )
    mixed = {f"{m}@mixed_bfloat16" for m in MODELS}
    assert set(result["models"]) == MODELS | mixed
    assert result["models"]["floor@mixed_bfloat16"]["over_floor"] == 1.0  # its own floor
    assert result["model"] == "deeprec-dlrm" and result["cores"] >= 1
    assert "speed-up of sok_lite_static@mixed_bfloat16 over plain Keras" in stdout
    assert "DeepRec's published figure" in stdout


def test_e2e_profile_target_reports_its_pid_when_warm(tmp_path):
    ready = tmp_path / "ready"
    args = ["--kind", "sok_lite_dynamic", "--scale", "0.0001", "--warm", "1", "--steps", "2"]
    proc = run_benchmark("e2e_profile_target.py", *args, "--ready", str(ready))
    assert int(ready.read_text()) > 0
    assert "sok_lite_dynamic, scale 0.0001: " in proc.stdout
    assert "a step over 2 steps" in proc.stdout
