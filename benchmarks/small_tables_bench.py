"""Small real tables under model.fit: sok_lite against plain Keras, tracing included.

Usage: python benchmarks/small_tables_bench.py [--epochs 5] [--repeats 3] [--autotune on|off]
                                              [--loop fit|custom] [--json PATH]

The workload has the shape of MovieLens-100k: 943 users, 1,682 items, 100,000 ratings whose
users and items follow Zipf-like popularity (synthetic: the machines have no dataset download).
A user and an item embedding (d = 32), concatenated, Dense(64, relu), Dense(1), mean squared
error, Adam 1e-3, batch 512. Each repeat builds both models afresh in this process and times
`fit(epochs=...)` from the call (so the first epoch's tracing counts) to its return; the order of
the two sides alternates between repeats. The ratio is plain Keras time over sok_lite time
(above 1: sok_lite is faster), median over the repeats.

A third model, the floor, takes the same turns: the same inputs, concatenation, dense layers,
loss and optimizer, with each embedding replaced by a Dense(32) of its id (cast to float), so a
step with no table at all. Plain Keras time over the floor's shows how much of the step the
tables are: the rest is the per-step and per-trace cost of Keras' loop and of the dense layers,
which no table changes.

`--loop custom` trains each model with a custom loop instead: a tf.function step (GradientTape,
then the optimizer's apply_gradients) called on every batch. sok_lite's side applies a plain
Keras Adam inside `sok.OptimizerScope(tables)`, the others as Keras users write it. The number
of times each side's step was traced is printed beside its time.
"""

import argparse
import contextlib
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import add_autotune_option, memory_setting, with_autotune  # noqa: E402

import sok_lite as sok  # noqa: E402

USERS, ITEMS, RATINGS, DIM = 943, 1682, 100_000, 32


def ratings(seed: int = 0) -> tuple[dict, np.ndarray]:
    """(inputs, targets) shaped like MovieLens-100k: Zipf-ish popularity, ratings 1..5."""
    rng = np.random.default_rng(seed)

    def popular(n: int) -> np.ndarray:
        p = 1.0 / np.arange(1, n + 1) ** 0.9
        return rng.permutation(n)[rng.choice(n, RATINGS, p=p / p.sum())]

    x = {"user": popular(USERS).astype(np.int64), "item": popular(ITEMS).astype(np.int64)}
    y = rng.integers(1, 6, RATINGS).astype(np.float32)
    return x, y


def build(kind: str, loop: str = "fit") -> keras.Model:
    inputs = {name: keras.Input(shape=(), dtype="int64", name=name) for name in ("user", "item")}
    if kind == "floor":

        def no_table(ids):
            return keras.layers.Dense(DIM)(
                keras.ops.expand_dims(keras.ops.cast(ids, "float32"), -1)
            )

        user, item = no_table(inputs["user"]), no_table(inputs["item"])
        optimizer = keras.optimizers.Adam(1e-3)
    elif kind == "plain_keras":
        user = keras.layers.Embedding(USERS, DIM)(inputs["user"])
        item = keras.layers.Embedding(ITEMS, DIM)(inputs["item"])
        optimizer = keras.optimizers.Adam(1e-3)
    else:
        specs = [
            sok.keras.FeatureSpec("user", input_dim=USERS, output_dim=DIM),
            sok.keras.FeatureSpec("item", input_dim=ITEMS, output_dim=DIM),
        ]
        user, item = sok.keras.EmbeddingCollection(specs)([inputs["user"], inputs["item"]])
        optimizer = keras.optimizers.Adam(1e-3)
        if loop == "fit":  # a custom loop routes the tables with sok.OptimizerScope instead
            optimizer = sok.keras.OptimizerWrapper(optimizer)
    h = keras.layers.Concatenate()([user, item])
    h = keras.layers.Dense(64, activation="relu")(h)
    model = keras.Model(inputs, keras.layers.Dense(1)(h))
    model.compile(optimizer=optimizer, loss="mse")
    return model


def custom_loop(model: keras.Model, data: tf.data.Dataset, epochs: int, first: dict) -> int:
    """Trains `model` with a tf.function step of its own; returns how often it was traced."""
    optimizer, loss_fn = model.optimizer, keras.losses.MeanSquaredError()
    tables, _ = sok.filter_variables(model.trainable_variables)
    traces = []

    @tf.function
    def step(x, y):
        traces.append(1)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        weights = model.trainable_variables
        grads = tape.gradient(loss, weights)
        with sok.OptimizerScope(tables) if tables else contextlib.nullcontext():
            optimizer.apply_gradients(zip(grads, weights))
        return loss

    for _ in range(epochs):
        for x, y in data:
            step(x, y)
            first.setdefault("t", time.perf_counter())
    return len(traces)


def run(kind: str, data: tf.data.Dataset, epochs: int, loop: str = "fit") -> dict:
    """Seconds of a fresh model's training, and how much of it the first step took."""
    model = build(kind, loop)
    first = {}
    if loop == "custom":
        start = time.perf_counter()
        traces = custom_loop(model, data, epochs, first)
        total = time.perf_counter() - start
        return {"total_s": total, "first_step_s": first["t"] - start, "traces": traces}

    class FirstStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            first.setdefault("t", time.perf_counter())

    start = time.perf_counter()
    model.fit(data, epochs=epochs, verbose=0, callbacks=[FirstStep()])
    total = time.perf_counter() - start
    return {"total_s": total, "first_step_s": first["t"] - start}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", type=int, default=512)
    add_autotune_option(p)
    p.add_argument(
        "--loop",
        choices=["fit", "custom"],
        default="fit",
        help="train with model.fit, or with a tf.function step of each model's own",
    )
    p.add_argument("--json", help="also write the results to this JSON file")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    print(memory_setting())
    x, y = ratings()
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch).prefetch(2)
    data = with_autotune(data, args.autotune)
    steps = -(-RATINGS // args.batch)
    print(
        f"small tables: {USERS} users, {ITEMS} items, d={DIM}, batch {args.batch}, "
        f"{args.epochs} epochs of {steps} steps, fresh models, tracing included, "
        f"tf.data autotuning {args.autotune}, {args.loop} loop"
    )
    kinds = ["plain_keras", "sok_lite", "floor"]
    results: dict = {k: [] for k in kinds}
    for repeat in range(args.repeats):
        for kind in kinds if repeat % 2 == 0 else kinds[::-1]:
            results[kind].append(run(kind, data, args.epochs, args.loop))
            keras.backend.clear_session()
    summary: dict = {"autotune": args.autotune, "loop": args.loop}
    for kind in kinds:
        totals = [r["total_s"] for r in results[kind]]
        firsts = [r["first_step_s"] for r in results[kind]]
        summary[kind] = {
            "total_s": totals,
            "first_step_s": firsts,
            "median_total_s": float(np.median(totals)),
            "median_first_step_s": float(np.median(firsts)),
        }
        traces = ""
        if args.loop == "custom":
            summary[kind]["traces"] = [r["traces"] for r in results[kind]]
            traces = f", step traced {results[kind][0]['traces']} times"
        print(
            f"  {kind:12s} {args.loop} {np.median(totals):6.2f} s (runs "
            + ", ".join(f"{t:.2f}" for t in totals)
            + f"), first step {np.median(firsts):5.2f} s{traces}"
        )
    ratios = [
        k / s for k, s in zip(summary["plain_keras"]["total_s"], summary["sok_lite"]["total_s"])
    ]
    summary["ratio_median"] = float(np.median(ratios))
    summary["ratios"] = ratios
    bound = [k / f for k, f in zip(summary["plain_keras"]["total_s"], summary["floor"]["total_s"])]
    summary["floor_ratio_median"] = float(np.median(bound))
    summary["floor_ratios"] = bound
    print(
        f"  plain Keras / sok_lite: {summary['ratio_median']:.2f}x median "
        f"(per repeat {', '.join(f'{r:.2f}' for r in ratios)})"
    )
    print(
        f"  plain Keras / floor (no table at all): {summary['floor_ratio_median']:.2f}x median "
        f"(per repeat {', '.join(f'{r:.2f}' for r in bound)})"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
