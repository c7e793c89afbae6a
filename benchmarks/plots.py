"""Figures of the benchmark and example results, as PNG files.

    python benchmarks/plots.py --results benchmarks/results --out docs/figures

Reads every JSON file under --results and writes:

- step_time_vs_table_size.png: e2e step time (ms) against the total rows of the tables;
- samples_per_s_vs_features.png: e2e samples/s against the number of categorical features;
- examples_curves.png: the examples' training loss and AUC per epoch (files written by
  `examples/*/train.py --history-json`);
- tiered_hit_rate_vs_budget.png: a tiered table's RAM-tier hit rate (measured, and predicted
  by sok.plan_memory as dashed lines) and its step time over an all-RAM table's, against the
  budget's fraction of the table, one line per Zipf exponent (`tiered_bench.py sweep`).

E2E results are files with "benchmark": "e2e" (benchmarks/e2e_bench.py). A figure or line with
no data is skipped with a message, so a partial set of results still gives the other figures.
"""

import argparse
import collections
import json
import pathlib
import statistics
import sys

import matplotlib

matplotlib.use("Agg")  # files only: no display needed

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator, NullLocator  # noqa: E402

# e2e model keys, their legend labels and line styles, in legend order.
E2E_MODELS = {
    "plain_keras": ("plain Keras", {"color": "tab:red", "marker": "s"}),
    "sok_lite_static": ("sok_lite static", {"color": "tab:blue", "marker": "o"}),
    "sok_lite_dynamic": ("sok_lite hash tables", {"color": "tab:green", "marker": "^"}),
    "floor": ("floor", {"color": "gray", "marker": ".", "linestyle": "--"}),
}


def load_results(results_dir: pathlib.Path) -> tuple[list[dict], list[dict], list[dict]]:
    """(e2e results, example histories, tiered sweeps) of the JSON files under results_dir, in
    path order."""
    e2e, examples, sweeps = [], [], []
    for path in sorted(results_dir.rglob("*.json")):
        try:
            result = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            print(f"skipped {path}: {error}")
            continue
        if not isinstance(result, dict):
            continue
        if result.get("benchmark") == "e2e":
            e2e.append(result)
        elif result.get("benchmark") == "tiered_sweep":
            sweeps.append(result)
        elif "example" in result and result.get("epochs"):
            examples.append({**result, "path": path})
    return e2e, examples, sweeps


def largest_sweep(results: list[dict], fixed: tuple[str, ...], varied: str) -> list[dict]:
    """The results sharing the `fixed` settings that cover the most distinct `varied` values.

    A sweep of table sizes and a sweep of feature counts can sit in one directory: each figure
    draws one of them, not a mix of settings.
    """
    groups = collections.defaultdict(list)
    for result in results:
        if varied in result:
            groups[tuple(result.get(key) for key in fixed)].append(result)
    if not groups:
        return []
    return max(groups.values(), key=lambda group: len({r[varied] for r in group}))


def model_points(results: list[dict], x_key: str, y_key: str) -> dict[str, list[tuple]]:
    """Per model: sorted (x, median y over the results at that x) of the models present."""
    points = {}
    for model in E2E_MODELS:
        by_x = collections.defaultdict(list)
        for result in results:
            y = result.get("models", {}).get(model, {}).get(y_key)
            if y is not None:
                by_x[result[x_key]].append(y)
        if by_x:
            points[model] = sorted((x, statistics.median(ys)) for x, ys in by_x.items())
        else:
            print(f"  no {model} results: its line is left out")
    return points


def plot_e2e(results, out, name, varied, fixed, y_key, xlabel, ylabel, log_x, log_y=False):
    sweep = largest_sweep(results, fixed, varied)
    if not sweep:
        print(f"{name}: no e2e results, skipped")
        return
    print(f"{name}: {len(sweep)} e2e result(s)")
    points = model_points(sweep, varied, y_key)
    if not points:
        print(f"{name}: no model has {y_key}, skipped")
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for model, xy in points.items():
        label, style = E2E_MODELS[model]
        ax.plot(*zip(*xy), label=label, **style)
    if log_x:
        ax.set_xscale("log")
    if log_y:  # plain Keras grows 100x over the sweep; the others would sit on the axis
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    settings = ", ".join(f"{key} {sweep[0].get(key)}" for key in fixed)
    ax.set_title(settings, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    save(fig, out / name)


def plot_examples(histories: list[dict], out: pathlib.Path) -> None:
    name = "examples_curves.png"
    if not histories:
        print(f"{name}: no example histories (--history-json), skipped")
        return
    fig, (loss_ax, auc_ax) = plt.subplots(1, 2, figsize=(10, 4))
    names = [h["example"] for h in histories]
    for history, color in zip(histories, plt.rcParams["axes.prop_cycle"].by_key()["color"]):
        label = history["example"]
        if names.count(label) > 1:
            label = f"{label} ({history['path'].stem})"
        plot_history(history, label, color, loss_ax, auc_ax)
    loss_ax.set(xlabel="epoch", ylabel="training loss (binary cross-entropy)")
    auc_ax.set(xlabel="epoch", ylabel="held-out AUC")
    for ax in (loss_ax, auc_ax):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    print(f"{name}: {len(histories)} example histories")
    save(fig, out / name)


def plot_history(history: dict, label: str, color, loss_ax, auc_ax) -> None:
    """One example's loss (per epoch, and per logged step in fractions of an epoch) and AUC."""
    epochs = history["epochs"]
    loss_ax.plot(
        [e["epoch"] for e in epochs],
        [e["loss"] for e in epochs],
        "o-",
        color=color,
        label=f"{label}, epoch mean",
    )
    steps_per_epoch = history.get("args", {}).get("steps_per_epoch")
    if history.get("steps") and steps_per_epoch:
        steps = history["steps"]
        loss_ax.plot(
            [s["step"] / steps_per_epoch for s in steps],
            [s["loss"] for s in steps],
            "-",
            color=color,
            alpha=0.35,
            linewidth=1,
            label=f"{label}, logged steps",
        )
    evaluated = [e for e in epochs if e.get("auc") is not None]
    if not evaluated:
        print(f"  {label}: no AUC")
        return
    x = [e["epoch"] for e in evaluated]
    # wide & deep evaluates once, after training: say so rather than leave a lone point.
    only = "" if len(evaluated) == len(epochs) else f" (after epoch {x[-1]} only)"
    model_label = f"{label}, model{only}"
    auc_ax.plot(x, [e["auc"] for e in evaluated], "o-", color=color, label=model_label)
    if all(e.get("oracle_auc") is not None for e in evaluated):
        auc_ax.plot(
            x,
            [e["oracle_auc"] for e in evaluated],
            "x--",
            color=color,
            label=f"{label}, planted model (oracle)",
        )


def plot_tiered_sweep(sweeps: list[dict], out: pathlib.Path) -> None:
    """The first sweep's (in path order) hit rate and step-time ratio against the budget
    fraction."""
    name = "tiered_hit_rate_vs_budget.png"
    points = [p for p in sweeps[0]["points"] if p.get("feasible")] if sweeps else []
    if not points:
        print(f"{name}: no tiered sweep results (tiered_bench.py sweep), skipped")
        return
    sweep = sweeps[0]
    fig, (hit_ax, ratio_ax) = plt.subplots(1, 2, figsize=(10, 4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    exponents = sorted({p["exponent"] for p in points})
    for exponent, color in zip(exponents, colors):
        line = sorted((p for p in points if p["exponent"] == exponent), key=lambda p: p["fraction"])
        x = [p["fraction"] for p in line]
        label = f"Zipf({exponent:g})"
        hit_ax.plot(x, [p["hit_rate"] for p in line], "o-", color=color, label=label)
        hit_ax.plot(
            x,
            [p["predicted_hit_rate"] for p in line],
            "--",
            color=color,
            label=f"{label}, predicted",
        )
        ratio_ax.plot(x, [p["ratio"] for p in line], "o-", color=color, label=label)
    hit_ax.set(xlabel="RAM budget / table (rows + slots)", ylabel="RAM-tier hit rate")
    ratio_ax.set(xlabel="RAM budget / table (rows + slots)", ylabel="step time, tiered / all-RAM")
    fractions = sorted({p["fraction"] for p in points})
    for ax in (hit_ax, ratio_ax):
        ax.set_xscale("log")
        ax.set_xticks(fractions, [f"1/{1 / f:.3g}" for f in fractions])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    infeasible = sorted({f"1/{1 / p['fraction']:.3g}" for p in sweep["points"]} - {
        f"1/{1 / f:.3g}" for f in fractions
    })  # fmt: skip
    fig.suptitle(
        f"{sweep['keys']:,} keys, d = {sweep['dim']}, {sweep['optimizer']}, {sweep['batch']:,} "
        f"ids a step, {sweep['policy']}"
        + (f"; {', '.join(infeasible)}: one batch's rows do not fit" if infeasible else ""),
        fontsize=9,
    )
    print(f"{name}: {len(points)} sweep points")
    save(fig, out / name)


def save(fig, path: pathlib.Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"  wrote {path}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", default="benchmarks/results", help="directory of JSON files")
    parser.add_argument("--out", default="docs/figures", help="directory for the PNG files")
    args = parser.parse_args(argv)
    results_dir, out = pathlib.Path(args.results), pathlib.Path(args.out)
    if not results_dir.is_dir():
        sys.exit(f"no results directory {results_dir}")
    out.mkdir(parents=True, exist_ok=True)
    e2e, histories, sweeps = load_results(results_dir)
    plot_e2e(
        e2e,
        out,
        "step_time_vs_table_size.png",
        varied="total_rows",
        fixed=("features", "batch", "embedding_dim"),
        y_key="step_ms",
        xlabel="total table rows",
        ylabel="step time (ms, log scale)",
        log_x=True,
        log_y=True,
    )
    plot_e2e(
        e2e,
        out,
        "samples_per_s_vs_features.png",
        varied="features",
        fixed=("scale", "batch", "embedding_dim"),
        y_key="samples_per_s",
        xlabel="categorical features",
        ylabel="samples/s",
        log_x=False,
    )
    plot_examples(histories, out)
    plot_tiered_sweep(sweeps, out)


if __name__ == "__main__":
    main()
