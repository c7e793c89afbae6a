"""A DLRM under model.fit: plain Keras, sok_lite static and hash tables, the floor.

Usage: python benchmarks/e2e_bench.py [--model criteo-dlrm|deeprec-dlrm] [--scale 1.0]
         [--tables static|dynamic|both] [--features 26] [--batch N] [--multi-hot 0]
         [--precisions float32 mixed_bfloat16 ...] [--models ...] [--autotune on|off]
         [--warm-steps N] [--json PATH]

The workload (benchmarks/e2e_models.py): 13 dense inputs, `--features` categorical features of
one id each, Zipf(1.1) ids, d = 16, Adam. `--model criteo-dlrm` (default): Criteo-like tables
(`--scale` 1.0: 29M rows over 26 features), small MLPs, batch 4,096; `--model deeprec-dlrm`:
the tables, MLPs, optimizer and batch of DeepRec's modelzoo DLRM, whose published throughput
it prints beside ours per core. Each precision of `--precisions` (a Keras dtype policy) builds
every model once more under that policy. All models are built in this process; blocks of fit
steps alternate between them (each block as long as --block-seconds, at least --min-steps
steps) for --rounds rounds, and each model's step time is the median over its blocks of the
per-block median step.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from common import add_autotune_option, memory_setting, with_autotune  # noqa: E402
from e2e_models import (  # noqa: E402
    ARCHITECTURES,
    MODELS,
    batches,
    build_model,
    cardinalities,
    dataset,
    ragged_multi_hot,
)

# DeepRec's modelzoo DLRM, FP32 + BF16, on 4 cores (8 vCPUs): samples/s of its README.
DEEPREC_SAMPLES_PER_S = 60_907.11


class StepTimes(keras.callbacks.Callback):
    """Wall time of each training step but the first of a fit() call."""

    def __init__(self):
        super().__init__()
        self.times = []
        self._last = None

    def on_train_begin(self, logs=None):
        self._last = None

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        if self._last is not None:
            self.times.append(now - self._last)
        self._last = now


class Runner:
    """One model and its endless input; run_block() trains a block of steps."""

    def __init__(self, kind, cards, data, multi_hot, ragged, arch, precision, autotune):
        self.kind = kind if precision == "float32" else f"{kind}@{precision}"
        self.precision = precision
        keras.mixed_precision.set_global_policy(precision)
        try:
            self.model = build_model(kind, cards, multi_hot, ragged, arch)
        finally:
            keras.mixed_precision.set_global_policy("float32")
        self.data = with_autotune(dataset(data, ragged), autotune)
        self.block_ms = []
        self.step_s = None

    def run_block(self, block_seconds, min_steps, warm_steps=0):
        if self.step_s is None:  # first block: compile, warm up, then measure one step
            self._fit(2 + warm_steps)
            start = time.perf_counter()
            self._fit(2)
            self.step_s = (time.perf_counter() - start) / 2
            return
        steps = max(min_steps, int(block_seconds / self.step_s))
        timer = StepTimes()
        self._fit(steps + 1, timer)
        self.block_ms.append(1e3 * float(np.median(timer.times)))

    def _fit(self, steps, *callbacks):
        self.model.fit(
            self.data,
            steps_per_epoch=steps,
            epochs=1,
            verbose=0,
            shuffle=False,
            callbacks=list(callbacks),
        )


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=sorted(ARCHITECTURES), default="criteo-dlrm")
    p.add_argument("--scale", type=float, default=1.0, help="multiplies every table's rows")
    p.add_argument("--tables", choices=("static", "dynamic", "both"), default="both")
    p.add_argument("--features", type=int, default=26, help="one-hot categorical features")
    p.add_argument("--multi-hot", type=int, default=0, help="add a feature of 1..k ids")
    p.add_argument(
        "--multi-hot-input",
        choices=("ragged", "padded"),
        default="ragged",
        help="how sok_lite models get it (plain Keras always gets it padded with -1)",
    )
    p.add_argument("--batch", type=int, help="default: the model's (4,096 or 512)")
    p.add_argument(
        "--precisions",
        nargs="+",
        default=["float32"],
        choices=("float32", "mixed_float16", "mixed_bfloat16"),
    )
    p.add_argument("--distinct-batches", type=int, default=100, help="batches drawn, then cycled")
    p.add_argument("--models", nargs="+", choices=MODELS, help="default: all (per --tables)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--block-seconds", type=float, default=4.0)
    p.add_argument("--min-steps", type=int, default=3)
    add_autotune_option(p)
    p.add_argument(
        "--warm-steps",
        type=int,
        default=0,
        help="untimed steps of each model before its first block (--distinct-batches of them: "
        "the hash tables have inserted every key of the cycled batches before the timing)",
    )
    p.add_argument("--json", help="also write the results to this JSON file")
    return p.parse_args(argv)


def chosen_models(args) -> list[str]:
    models = list(args.models or MODELS)
    skip = {"static": "sok_lite_dynamic", "dynamic": "sok_lite_static"}.get(args.tables)
    return [m for m in models if m != skip]


def main(argv=None):
    args = parse_args(argv)
    args.batch = args.batch or ARCHITECTURES[args.model].batch
    print(memory_setting())
    cards = cardinalities(args.features, args.scale, args.model)
    data = batches(cards, args.batch, args.distinct_batches, args.multi_hot)
    ragged = args.multi_hot_input == "ragged"
    print(
        f"e2e: {args.model}, {args.features} features, {sum(cards):,} rows, batch {args.batch}, "
        f"d=16, multi-hot {args.multi_hot}, precisions {' '.join(args.precisions)}, "
        f"tf.data autotuning {args.autotune}"
    )
    runners = [
        Runner(
            kind,
            cards,
            data,
            args.multi_hot,
            ragged_multi_hot(kind, args.multi_hot, ragged),
            args.model,
            precision,
            args.autotune,
        )
        for precision in args.precisions
        for kind in chosen_models(args)
    ]
    for r in runners:
        r.run_block(args.block_seconds, args.min_steps, args.warm_steps)
    for _ in range(args.rounds):
        for r in runners:
            r.run_block(args.block_seconds, args.min_steps)
    results = {}
    floors = {}
    cores = len(os.sched_getaffinity(0))
    for r in runners:
        ms = float(np.median(r.block_ms))
        rate = args.batch / ms * 1e3
        results[r.kind] = {
            "step_ms": ms,
            "samples_per_s": rate,
            "per_core": rate / cores,
            "block_ms": [round(b, 3) for b in r.block_ms],
        }
        if r.kind.split("@")[0] == "floor":
            floors[r.precision] = ms
    # The share over the floor in ms scales with the machine's speed; step / floor does not.
    print(
        f"{'model':<32s} {'ms/step':>9s} {'samples/s':>11s} {'per core':>9s} {'- floor':>10s} "
        f"{'/ floor':>8s}"
    )
    for r in runners:
        res, floor = results[r.kind], floors.get(r.precision)
        extra = ratio = ""
        if floor is not None:
            res["over_floor"] = res["step_ms"] / floor
            extra, ratio = f"{res['step_ms'] - floor:7.1f} ms", f"{res['over_floor']:.2f}x"
        print(
            f"{r.kind:<32s} {res['step_ms']:9.1f} {res['samples_per_s']:11,.0f} "
            f"{res['per_core']:9,.0f} {extra:>10s} {ratio:>8s}"
        )
    for precision in args.precisions:
        tag = "" if precision == "float32" else f"@{precision}"
        plain = results.get("plain_keras" + tag)
        for kind in ("sok_lite_static", "sok_lite_dynamic"):
            if plain and kind + tag in results:
                ratio = plain["step_ms"] / results[kind + tag]["step_ms"]
                print(f"speed-up of {kind + tag} over plain Keras: {ratio:.2f}x")
    if args.model == "deeprec-dlrm":
        print(
            f"DeepRec's published figure for this model (modelzoo/dlrm/README.md, 4 cores / 8 "
            f"vCPUs of a Xeon 8369HC, batch 512): {DEEPREC_SAMPLES_PER_S:,.0f} samples/s "
            f"(FP32 + BF16), {DEEPREC_SAMPLES_PER_S / 4:,.0f} per core; here {cores} cores"
        )
    if args.json:
        record = {
            "benchmark": "e2e",
            "model": args.model,
            "precisions": args.precisions,
            "cores": cores,
            "scale": args.scale,
            "features": args.features,
            "multi_hot": args.multi_hot,
            "multi_hot_input": args.multi_hot_input if args.multi_hot else None,
            "total_rows": sum(cards),
            "batch": args.batch,
            "embedding_dim": 16,
            "autotune": args.autotune,
            "warm_steps": args.warm_steps,
            "command": "python " + " ".join(sys.argv),
            "models": results,
        }
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
