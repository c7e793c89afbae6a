"""What one `model.fit` call costs beyond its steps, per model and table size.

Usage: python benchmarks/fit_call_bench.py [--scale 1.0] [--calls 8] [--models ...] [--json PATH]

The DLRM of e2e_bench.py (26 features, batch 4096). Each model runs `--calls` calls of
`fit(steps_per_epoch=1)` on a tf.data input, with the input's tf.data autotuning on (the default)
and off, and reports per call: the time before the step (iterator, callbacks), the step, and the
time from the end of training (`on_train_end`) to fit's return, where the input's iterator is
destroyed. Medians over the calls.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import memory_setting  # noqa: E402
from e2e_models import MODELS, batches, build_model, cardinalities, dataset  # noqa: E402


class Marks(keras.callbacks.Callback):
    """perf_counter at the start of training, of the step, of its end and of training's end."""

    def on_train_begin(self, logs=None):
        self.t = {"begin": time.perf_counter()}

    def on_train_batch_begin(self, batch, logs=None):
        self.t["step"] = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.t["step_end"] = time.perf_counter()

    def on_train_end(self, logs=None):
        self.t["end"] = time.perf_counter()


def fit_calls(model, data, calls: int) -> dict:
    """Median ms of each part of a one-step fit call, over `calls` calls (after two warm-ups)."""
    for _ in range(2):
        model.fit(data, steps_per_epoch=1, epochs=1, verbose=0)
    parts: dict[str, list[float]] = {"before_step": [], "step": [], "after_train_end": []}
    parts["total"] = []
    for _ in range(calls):
        marks = Marks()
        start = time.perf_counter()
        model.fit(data, steps_per_epoch=1, epochs=1, verbose=0, callbacks=[marks])
        done = time.perf_counter()
        t = marks.t
        parts["before_step"].append(1e3 * (t["step"] - start))
        parts["step"].append(1e3 * (t["step_end"] - t["step"]))
        parts["after_train_end"].append(1e3 * (done - t["end"]))
        parts["total"].append(1e3 * (done - start))
    return {k: float(np.median(v)) for k, v in parts.items()} | {
        "after_all": parts["after_train_end"]
    }


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=float, default=1.0, help="multiplies every table's rows")
    p.add_argument("--calls", type=int, default=8)
    p.add_argument(
        "--models",
        nargs="+",
        choices=MODELS,
        default=["floor", "plain_keras", "sok_lite_static", "sok_lite_dynamic"],
    )
    p.add_argument("--json", help="also write the results to this JSON file")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    print(memory_setting())
    cards = cardinalities(26, args.scale)
    data = batches(cards, 4096, 8, 0)
    print(f"fit calls of one step: 26 features, {sum(cards):,} rows, batch 4096")
    print(
        f"{'model':<18s} {'autotune':<9s} {'before':>8s} {'step':>8s} {'teardown':>9s} "
        f"{'total':>8s}  ms"
    )
    results = {}
    for kind in args.models:
        model = build_model(kind, cards)
        for autotune in (True, False):
            ds = dataset(data)
            if not autotune:
                options = tf.data.Options()
                options.autotune.enabled = False
                ds = ds.with_options(options)
            r = fit_calls(model, ds, args.calls)
            results[f"{kind}/autotune_{'on' if autotune else 'off'}"] = r
            print(
                f"{kind:<18s} {'on' if autotune else 'off':<9s} {r['before_step']:8.1f} "
                f"{r['step']:8.1f} {r['after_train_end']:9.1f} {r['total']:8.1f}"
            )
        del model
        keras.backend.clear_session()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"scale": args.scale, "rows": sum(cards), "results": results}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
