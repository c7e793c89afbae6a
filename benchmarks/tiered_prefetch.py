"""tiered_bench.py's prefetch mode: `model.fit` throughput of a tiered table with and without
sok.keras.prefetch_rows, against the same model on an all-RAM table.

The model: one hash-table feature (--keys keys, d = --dim, one id per sample) through
EmbeddingCollection, a Dense(1) head, MSE, Adam through sok.keras.OptimizerWrapper. For each
budget (--prefetch-fractions: table / budget, the table being its rows and Adam slots in
float32) three models hold every key: all-RAM, tiered, tiered fed through prefetch_rows. They
then take turns (the order rotating) fitting --prefetch-steps fresh Zipf(--prefetch-exponent)
batches of 163,840 ids each, --rounds times: wall time per step, CPU time per step of the
whole process (every thread, the prefetch's included), busy CPU time per step of the whole
machine (the kernel's writeback of the tier files included) and the RAM tier's hit rate over the
timed steps. Before the timed rounds, each tiered model fits fresh batches until its tier file
stops growing and its spills stop falling (--prefetch-settle), so that the rounds time the
tier's steady state, not the one-off growth of its file or LFU's counts still ranking the keys.
With --prefetch-serial: tiered_bench's raw step instead, sok.prefetch called after each step
and timed apart from it (what the prefetch costs against the read-backs it replaces). With
--prefetch-beside: whether a prefetch reading from the disk holds up the step beside it: the raw
step on a batch whose rows are all in RAM, alone and with sok.prefetch of a fresh batch running
in another thread, the tier file's pages dropped from the page cache before each, so that the
prefetch's reads go to the disk.
"""

import os
import pathlib
import resource
import shutil
import tempfile
import threading
import time

import numpy as np
from common import add_autotune_option, memory_setting, with_autotune
from tiered_sweep import record, settle_tier_file, settled_order, zipf_sampler

VARIANTS = ("ram", "tiered", "prefetch")


def add_arguments(parser) -> None:
    """The prefetch mode's options of tiered_bench.py."""
    parser.add_argument("--prefetch-fractions", default="10,4", help="prefetch: table / budget")
    parser.add_argument("--prefetch-exponent", type=float, default=1.1, help="prefetch: Zipf")
    parser.add_argument("--prefetch-steps", type=int, default=8, help="prefetch: steps a round")
    parser.add_argument("--prefetch-warm", type=int, default=4, help="prefetch: untimed steps")
    parser.add_argument(
        "--prefetch-settle",
        type=int,
        default=60,
        help="prefetch: at most this many untimed fit calls of --prefetch-steps batches each "
        "until the tier files stop growing and their spills stop falling (0: time from the "
        "start, the file still growing)",
    )
    add_autotune_option(parser)
    parser.add_argument(
        "--prefetch-serial",
        action="store_true",
        help="prefetch: instead, tiered_bench's raw step (no Keras) with sok.prefetch called "
        "after each step, timed apart from it, at the first budget",
    )
    parser.add_argument(
        "--prefetch-beside",
        action="store_true",
        help="prefetch: instead, the raw step on rows in RAM alone and beside a prefetch whose "
        "reads go to the disk (page cache dropped), at the first budget",
    )


def _model(dim, storage, policy):
    import keras

    import sok_lite as sok

    feature = sok.keras.FeatureSpec(
        "ids",
        output_dim=dim,
        initializer=keras.initializers.RandomNormal(stddev=0.05, seed=1),
        storage=storage,
        evict_policy=policy,
    )
    inputs = {"ids": keras.Input(shape=(1,), dtype="int64", name="ids")}
    out = sok.keras.EmbeddingCollection([feature], name="features")(inputs)["ids"]
    head = keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")(out)
    model = keras.Model(inputs, head)
    model.compile(optimizer=sok.keras.OptimizerWrapper(keras.optimizers.Adam(0.001)), loss="mse")
    return model


def _dataset(batches, autotune, layer=None):
    """The batches as a fit dataset: ({"ids": [n, 1]}, zeros), read ahead by one batch
    (through prefetch_rows when a layer is given)."""
    import tensorflow as tf

    import sok_lite as sok

    def gen():
        for ids in batches:
            yield {"ids": ids.reshape(-1, 1)}, np.zeros(len(ids), np.float32)

    spec = (
        {"ids": tf.TensorSpec([None, 1], tf.int64)},
        tf.TensorSpec([None], tf.float32),
    )
    data = with_autotune(tf.data.Dataset.from_generator(gen, output_signature=spec), autotune)
    return sok.keras.prefetch_rows(data, layer) if layer else data.prefetch(1)


def _fit(model, batches, prefetch, autotune="on"):
    layer = model.get_layer("features") if prefetch else None
    model.fit(_dataset(batches, autotune, layer), epochs=1, verbose=0)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _machine_cpu_seconds() -> float:
    """Busy CPU time of the whole machine (/proc/stat: all but idle and iowait): the process's
    own plus the kernel threads that write its dirty tier-file pages back to the disk."""
    with open("/proc/stat") as stat:
        ticks = [int(v) for v in stat.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _clocks() -> np.ndarray:
    return np.array([time.perf_counter(), _cpu_seconds(), _machine_cpu_seconds()])


def _populate(model, order, chunk):
    """Stores every key of `order` (in that order) through fit, one key first: the optimizer's
    slots widen the rows before the table fills."""
    pieces = [order[:1]] + [order[i : i + chunk] for i in range(1, len(order), chunk)]
    _fit(model, pieces, prefetch=False)


def _point(args, fraction, ram, draw, probs, rng, batch_keys) -> dict:
    import sok_lite as sok

    budget = int(args.keys * args.dim * 3 * 4 / fraction)
    spec = {"rows": args.keys, "dim": args.dim, "kind": "hash", "ram_budget": budget}
    spec.update(zipf=args.prefetch_exponent, evict_policy=args.policy, batch_keys=batch_keys)
    entry = sok.plan_memory([spec], "adam")[0]
    point = {"fraction": 1 / fraction, "budget": budget, "predicted_hit_rate": entry["hit_rate"]}
    roots = [pathlib.Path(tempfile.mkdtemp(prefix="tiered_prefetch_", dir=args.dir)) for _ in "ab"]
    try:
        models = {"ram": ram}
        for name, root in zip(("tiered", "prefetch"), roots):
            models[name] = _model(args.dim, sok.storage.Disk(str(root), budget), args.policy)
            order = settled_order(np.random.default_rng(7), probs, args.policy)
            _populate(models[name], order, max(entry["rows_ram"] // 2, 1))
        warm = [draw(rng, args.sweep_batch) for _ in range(args.prefetch_warm)]
        for name, model in models.items():
            _fit(model, warm, name == "prefetch", args.autotune)
        tables = {n: m.get_layer("features").tables["ids"] for n, m in models.items()}
        for name in ("tiered", "prefetch"):
            point[name + "_settle_calls"] = settle_tier_file(
                tables[name],
                lambda m=models[name], p=name == "prefetch": _fit(
                    m,
                    [draw(rng, args.sweep_batch) for _ in range(args.prefetch_steps)],
                    p,
                    args.autotune,
                ),
                args.prefetch_settle,
            )
        before = {n: dict(t.memory_stats()) for n, t in tables.items()}
        spent = {n: [] for n in VARIANTS}  # per round: wall, process CPU, machine CPU (ms a step)
        for r in range(args.rounds):
            batches = [draw(rng, args.sweep_batch) for _ in range(args.prefetch_steps)]
            for name in VARIANTS[r % 3 :] + VARIANTS[: r % 3]:
                start = _clocks()
                _fit(models[name], batches, name == "prefetch", args.autotune)
                spent[name].append((_clocks() - start) * 1e3 / args.prefetch_steps)
        for name in VARIANTS:
            after = tables[name].memory_stats()
            hits, misses = (after[k] - before[name][k] for k in ("hits", "misses"))
            wall, cpu, machine = np.array(spent[name]).T
            point[name] = {
                "ms_per_step": float(np.median(wall)),
                "cpu_ms_per_step": float(np.median(cpu)),
                "machine_cpu_ms_per_step": float(np.median(machine)),
                "rounds_ms": [round(float(v), 2) for v in wall],
                "hit_rate": hits / max(hits + misses, 1),
                "rows_ram": after["rows_ram"],
                "bytes_disk": after["bytes_disk"],
            }
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
    ram = point["ram"]
    settled = ", ".join(f"{n} {point[n + '_settle_calls']}" for n in ("tiered", "prefetch"))
    print(
        f"  1/{fraction:g} budget ({budget / 2**20:,.1f} MiB; untimed fit calls until the tier "
        f"files stopped growing: {settled}):",
        flush=True,
    )
    for name in VARIANTS:
        v = point[name]
        v["ratio"] = v["ms_per_step"] / ram["ms_per_step"]
        v["cpu_ratio"] = v["cpu_ms_per_step"] / ram["cpu_ms_per_step"]
        v["machine_cpu_ratio"] = v["machine_cpu_ms_per_step"] / ram["machine_cpu_ms_per_step"]
        print(
            f"    {name:9s} {v['ms_per_step']:7.1f} ms/step ({v['ratio']:.2f}x all-RAM), "
            f"CPU {v['cpu_ms_per_step']:7.1f} ms/step ({v['cpu_ratio']:.2f}x), machine CPU "
            f"{v['machine_cpu_ms_per_step']:7.1f} ms/step ({v['machine_cpu_ratio']:.2f}x), "
            f"hit rate {v['hit_rate']:.3f}, {v['rows_ram']:,} rows in RAM, tier file "
            f"{v['bytes_disk'] / 1e9:.2f} GB",
            flush=True,
        )
    return point


def serial(bench, args, draw, probs) -> dict:
    """Two tiered tables at the first budget, the raw step (lookup + gradient + Adam) on each
    fresh batch in turn; after its step, one table gets sok.prefetch of the next batch (timed
    apart). Returns the mean ms of the plain step, the prefetched step and the prefetch."""
    import tensorflow as tf

    import sok_lite as sok

    fraction = float(args.prefetch_fractions.split(",")[0])
    budget = int(args.keys * args.dim * 3 * 4 / fraction)
    roots = [pathlib.Path(tempfile.mkdtemp(prefix="tiered_prefetch_", dir=args.dir)) for _ in "ab"]
    try:
        steps = [_filled_table(bench, args, draw, probs, budget, root) for root in roots]
        (_, plain), (ahead, ahead_step) = steps
        ahead_prefetch = tf.function(lambda ids: sok.prefetch(ahead, ids, wait_for_lookup=False))
        rng = np.random.default_rng(1)
        count = args.rounds * args.prefetch_steps
        batches = [bench._ragged(draw(rng, args.sweep_batch)) for _ in range(count + 5)]
        for ids in batches[:4]:
            plain(ids)
            ahead_step(ids)
        ahead_prefetch(batches[4])
        spent = np.zeros(3)
        for i in range(5, 5 + count - 1):
            marks = [time.perf_counter()]
            for call, ids in ((plain, batches[i]), (ahead_step, batches[i])):
                call(ids)
                marks.append(time.perf_counter())
            ahead_prefetch(batches[i + 1])
            marks.append(time.perf_counter())
            spent += np.diff(marks)
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
    plain_ms, step_ms, prefetch_ms = spent / (count - 1) * 1e3
    print(
        f"  serial, 1/{fraction:g} budget: {plain_ms:.1f} ms a step without prefetch; "
        f"{step_ms:.1f} ms a step + {prefetch_ms:.1f} ms of prefetch with it",
        flush=True,
    )
    return {
        "fraction": 1 / fraction,
        "plain_ms": plain_ms,
        "step_ms": step_ms,
        "prefetch_ms": prefetch_ms,
    }


def _filled_table(bench, args, draw, probs, budget, root):
    """A tiered table at `budget` in root holding every key, coldest first, and its raw step."""
    import sok_lite as sok

    table = bench._table(args.dim, sok.storage.Disk(str(root), budget))
    step, _ = bench._train_step(table, args.dim)
    order = settled_order(np.random.default_rng(7), probs, args.policy)
    chunk = min(60_000, args.sweep_batch)  # new keys a fill step: a batch's worth at most
    step(bench._ragged(order[:1]))
    for start in range(1, args.keys, chunk):
        step(bench._ragged(order[start : start + chunk]))
    return table, step


def beside(bench, args, draw, probs) -> dict:
    """The raw step on one batch (its rows in RAM after its first step) alone and while a
    thread runs sok.prefetch of a fresh batch, the tier file's page cache dropped before each,
    in turn. Returns the mean ms of the step alone, the step beside a prefetch, the prefetch,
    and the rows a prefetch read back."""
    import tensorflow as tf

    import sok_lite as sok

    fraction = float(args.prefetch_fractions.split(",")[0])
    budget = int(args.keys * args.dim * 3 * 4 / fraction)
    root = pathlib.Path(tempfile.mkdtemp(prefix="tiered_prefetch_", dir=args.dir))
    try:
        table, step = _filled_table(bench, args, draw, probs, budget, root)
        fetch = tf.function(lambda ids: sok.prefetch(table, ids, wait_for_lookup=False))
        rng = np.random.default_rng(1)
        hot = bench._ragged(draw(rng, args.sweep_batch))
        count = args.rounds * args.prefetch_steps
        fresh = [bench._ragged(draw(rng, args.sweep_batch)) for _ in range(count + 1)]
        step(hot)
        step(hot)  # every row of the batch in RAM from now on
        fetch(fresh[-1])
        alone, with_fetch, fetched, read = [], [], [], []

        def prefetch(ids):
            t0 = time.perf_counter()
            read.append(int(fetch(ids)))
            fetched.append(time.perf_counter() - t0)

        for i in range(count):
            bench._drop_page_cache(root)
            t0 = time.perf_counter()
            step(hot)
            alone.append(time.perf_counter() - t0)
            bench._drop_page_cache(root)
            thread = threading.Thread(target=prefetch, args=(fresh[i],))
            t0 = time.perf_counter()
            thread.start()
            step(hot)
            with_fetch.append(time.perf_counter() - t0)
            thread.join()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    alone_ms, beside_ms, prefetch_ms = (np.median(v) * 1e3 for v in (alone, with_fetch, fetched))
    rows = float(np.mean(read))
    print(
        f"  beside, 1/{fraction:g} budget: a step alone {alone_ms:.1f} ms, beside a prefetch "
        f"{beside_ms:.1f} ms; the prefetch {prefetch_ms:.1f} ms for {rows:,.0f} rows from the "
        "disk (medians)",
        flush=True,
    )
    return {
        "fraction": 1 / fraction,
        "alone_ms": alone_ms,
        "beside_ms": beside_ms,
        "prefetch_ms": prefetch_ms,
        "rows_read": rows,
    }


def run(bench, args) -> dict:
    """Every budget of args.prefetch_fractions; writes args.json (default
    benchmarks/results/tiered_prefetch.json)."""
    draw, probs = zipf_sampler(args.keys, args.prefetch_exponent)
    rng = np.random.default_rng(0)
    batch_keys = int(np.mean([len(np.unique(draw(rng, args.sweep_batch))) for _ in range(4)]))
    kind = "raw step" if args.prefetch_serial or args.prefetch_beside else "model.fit"
    print(
        f"prefetch: {kind}, {args.keys:,} keys, d = {args.dim}, Adam, {args.sweep_batch:,} "
        f"Zipf({args.prefetch_exponent:g}) ids a step (~{batch_keys:,} distinct), evict_policy "
        f"{args.policy!r}; {args.rounds} rounds of {args.prefetch_steps} fresh batches per "
        f"model; tf.data autotuning {args.autotune}; load average {os.getloadavg()[0]:.1f}; "
        f"{memory_setting()}",
        flush=True,
    )
    started = time.perf_counter()
    load = [os.getloadavg()[0]]
    if args.prefetch_beside:
        points = [beside(bench, args, draw, probs)]
    elif args.prefetch_serial:
        points = [serial(bench, args, draw, probs)]
    else:
        ram = _model(args.dim, None, args.policy)
        _populate(ram, np.arange(args.keys, dtype=np.int64), bench.BATCH)
        points = [
            _point(args, float(f), ram, draw, probs, rng, batch_keys)
            for f in args.prefetch_fractions.split(",")
        ]
    load.append(os.getloadavg()[0])
    name = "tiered_prefetch"
    if args.prefetch_beside or args.prefetch_serial:
        name += "_beside" if args.prefetch_beside else "_serial"
    return record(
        name,
        args,
        started,
        load,
        points,
        exponent=args.prefetch_exponent,
        policy=args.policy,
        autotune=args.autotune,
    )
