"""benchmarks/plots.py draws its figures from synthetic results, and skips what is missing."""

import json
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")

PLOTS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "plots.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
E2E_FIGURES = ("step_time_vs_table_size.png", "samples_per_s_vs_features.png")


def e2e_result(scale, features, models):
    return {
        "benchmark": "e2e",
        "scale": scale,
        "features": features,
        "total_rows": int(29_010_000 * scale * features / 26),
        "batch": 4096,
        "embedding_dim": 16,
        "command": "python benchmarks/e2e_bench.py",
        "models": {m: {"step_ms": 10.0 * scale + features, "samples_per_s": 1e5} for m in models},
    }


def history(example, epochs, auc_every_epoch):
    """An example's --history-json; without auc_every_epoch, the last epoch only has an AUC (as
    wide & deep evaluates once, after training)."""
    evaluated = {"auc": 0.8, "oracle_auc": 0.86}
    return {
        "example": example,
        "command": f"python examples/{example}/train.py",
        "args": {"steps_per_epoch": 10},
        "epochs": [
            {
                "epoch": e,
                "loss": 0.7 - 0.05 * e,
                "samples_per_s": 1e4,
                **(evaluated if auc_every_epoch or e == epochs else {}),
            }
            for e in range(1, epochs + 1)
        ],
        "steps": [{"step": s, "loss": 0.7 - 0.005 * s} for s in range(5, 10 * epochs + 1, 5)],
    }


def run_plots(results, out):
    proc = subprocess.run(
        [sys.executable, str(PLOTS), "--results", str(results), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def tiered_sweep_result():
    """tiered_bench.py sweep's file: two exponents, three budgets, one of them infeasible."""
    points = [
        {"exponent": a, "fraction": f, "feasible": True, "hit_rate": 1 - f / a}
        | {"predicted_hit_rate": 1 - f / a + 0.01, "ratio": 1 + 1 / f}
        for a in (1.1, 1.2)
        for f in (0.5, 0.25, 0.1)
    ]
    points.append({"exponent": 1.1, "fraction": 1 / 37, "feasible": False, "reason": "index"})
    return {"benchmark": "tiered_sweep", "keys": 1000, "dim": 64, "batch": 100}, points


def write_json(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def assert_png(path):
    assert path.read_bytes().startswith(PNG_SIGNATURE), path


def test_every_figure_is_drawn(tmp_path):
    results, out = tmp_path / "results", tmp_path / "figures"
    all_models = ["plain_keras", "sok_lite_static", "sok_lite_dynamic", "floor"]
    for scale in (0.01, 0.1, 1.0):
        write_json(results / f"e2e_scale{scale}.json", e2e_result(scale, 26, all_models))
    # plain Keras could not run the largest sweep point: its key is missing there.
    for features in (8, 16, 52):
        write_json(
            results / f"e2e_features{features}.json",
            e2e_result(1.0, features, all_models[1:] if features == 52 else all_models),
        )
    write_json(results / "examples" / "dlrm.json", history("dlrm", 3, True))
    write_json(results / "examples" / "wide_deep.json", history("wide_deep", 3, False))
    settings, points = tiered_sweep_result()
    write_json(results / "tiered_sweep.json", {**settings, "optimizer": "adam", "policy": "lru"}
               | {"points": points})  # fmt: skip
    (results / "not_json.json").write_text("{")  # a broken file is reported, not fatal

    stdout = run_plots(results, out)
    assert "tiered_hit_rate_vs_budget.png: 6 sweep points" in stdout
    for name in (*E2E_FIGURES, "examples_curves.png", "tiered_hit_rate_vs_budget.png"):
        assert_png(out / name)
    assert "not_json.json" in stdout


def test_missing_results_skip_their_figures(tmp_path):
    results, out = tmp_path / "results", tmp_path / "figures"
    write_json(results / "e2e_only_floor.json", e2e_result(1.0, 26, ["floor"]))

    stdout = run_plots(results, out)
    assert_png(out / "step_time_vs_table_size.png")
    assert "no plain_keras results" in stdout
    assert not (out / "examples_curves.png").exists()
    assert "examples_curves.png: no example histories" in stdout
    assert "tiered_hit_rate_vs_budget.png: no tiered sweep results" in stdout
