"""tiered_bench.py's sweep mode: hit rate and step time of a tiered table against its budget.

For each Zipf exponent and budget fraction: a tiered table (budget = the fraction of its rows
and Adam slots) and an all-RAM table hold --keys rows; both run the training step of the zipf
mode on each fresh Zipf batch in turn; the tiered table's measured hit rate
(memory_stats() counters over the timed steps) is set beside sok.plan_memory's prediction.
A budget whose RAM rows (as the plan predicts them) cannot hold one batch's keys is recorded
as infeasible, with the plan's reason, and skipped.
"""

import datetime
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time
import warnings

import numpy as np

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def zipf_sampler(keys: int, exponent: float):
    """A function rng, n -> n ids with P(key k) ~ (k + 1)^-exponent over [0, keys), and the
    key probabilities."""
    probs = np.arange(1, keys + 1, dtype=np.float64) ** -exponent
    probs /= probs.sum()
    cdf = np.cumsum(probs)

    def draw(rng, n):
        return np.minimum(np.searchsorted(cdf, rng.random(n)), keys - 1).astype(np.int64)

    return draw, probs


def settled_order(rng, probs, policy: str):
    """Keys in the order to store them so that the RAM tier starts as it settles: LRU holds
    the keys most recently seen, and a key of probability p was last seen Exp(p) ids ago
    (oldest stored first); LFU holds the most frequent keys (rarest stored first)."""
    if policy == "lfu":
        return np.argsort(probs, kind="stable").astype(np.int64)
    age = rng.exponential(1.0 / probs)
    return np.argsort(-age, kind="stable").astype(np.int64)


def settle_tier_file(table, run, max_calls: int, window: int = 3) -> int:
    """Calls run() until table's tier file stops growing and its spills a call stop falling, at
    most max_calls times; returns the calls made. A tier file grows to about twice its live
    records before cleaning reuses its segments, and the first writes to a part of a file new
    to the page cache cost several times what rewriting its cached pages does
    (docs/benchmarks.md): steps timed while it grows measure that one-off growth, not the tier's
    steady state. LFU's counts take a few hundred steps to rank the keys at the edge of RAM,
    and its spills (rows read back) fall until they do: settled once the last `window` calls
    spilled at least 97% of the `window` calls before them (a spill moves a sixteenth of the
    RAM rows, so one call's count is too coarse)."""
    stats = table.memory_stats()
    sizes, spills = [stats["bytes_disk"]], [stats["spills"]]
    for calls in range(1, max_calls + 1):
        run()
        stats = table.memory_stats()
        sizes.append(stats["bytes_disk"])
        spills.append(stats["spills"])
        if calls < 2 * window or sizes[-1] != sizes[-2]:
            continue
        recent = spills[-1] - spills[-1 - window]
        earlier = spills[-1 - window] - spills[-1 - 2 * window]
        if recent >= 0.97 * earlier:
            return calls
    return max_calls


def _budget_plan(keys, dim, fraction, exponent, policy, batch_keys):
    import sok_lite as sok

    budget = int(keys * dim * 3 * 4 / fraction)  # rows and two Adam slots, float32
    spec = {"rows": keys, "dim": dim, "kind": "hash", "ram_budget": budget, "name": "sweep"}
    spec.update(zipf=exponent, evict_policy=policy, batch_keys=batch_keys)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = sok.plan_memory([spec], "adam")
    return budget, plan[0], [str(w.message) for w in caught]


def _paired(steps, draw, rng, batch, pairs, ragged):
    """Median ms per step of each of `steps` and the median of their per-batch ratios
    (steps[1] / steps[0]): each runs on every fresh batch in turn (drawn outside the timing),
    so that load from other processes falls on both alike."""
    times = [[] for _ in steps]
    for _ in range(pairs):
        ids = ragged(draw(rng, batch))
        for step, spent in zip(steps, times):
            start = time.perf_counter()
            step(ids)
            spent.append((time.perf_counter() - start) * 1e3)
    ratio = float(np.median(np.array(times[1]) / np.array(times[0])))
    return [float(np.median(t)) for t in times], ratio


def sweep_point(bench, args, exponent, fraction, ram, draw, probs, batch_keys):
    """One (exponent, budget fraction) point: a fresh tiered table beside the all-RAM one."""
    import sok_lite as sok

    budget, entry, warned = _budget_plan(
        args.keys, args.dim, fraction, exponent, args.policy, batch_keys
    )
    point = {"exponent": exponent, "fraction": 1 / fraction, "budget": budget}
    point.update(rows_ram_planned=entry["rows_ram"], predicted_hit_rate=entry["hit_rate"])
    if entry["rows_ram"] < batch_keys:
        point.update(feasible=False, reason=warned[0] if warned else "")
        print(f"  1/{fraction:g}: infeasible: {point['reason']}")
        return point
    rng = np.random.default_rng(int(exponent * 1000) + int(fraction))
    root = pathlib.Path(tempfile.mkdtemp(prefix="tiered_sweep_", dir=args.dir))
    try:
        disk = sok.storage.Disk(str(root), ram_budget=budget)
        tiered = bench._table(args.dim, disk, policy=args.policy)
        tiered_step, _ = bench._train_step(tiered, args.dim)
        order = settled_order(rng, probs, args.policy)
        # One key first: the optimizer's slots widen the rows before the table fills (rows
        # widened in RAM stay there past the budget until a step reads a row back).
        tiered_step(bench._ragged(order[:1]))
        chunk = max(entry["rows_ram"] // 2, 1)
        for start in range(1, args.keys, chunk):
            tiered_step(bench._ragged(order[start : start + chunk]))
        for _ in range(args.sweep_warm):
            tiered_step(bench._ragged(draw(rng, args.sweep_batch)))
        before = dict(tiered.memory_stats())
        pairs = args.rounds * args.iters
        (ram_ms, tiered_ms), ratio = _paired(
            [ram, tiered_step], draw, rng, args.sweep_batch, pairs, bench._ragged
        )
        after = tiered.memory_stats()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    hits, misses = (after[k] - before[k] for k in ("hits", "misses"))
    point.update(feasible=True, hit_rate=hits / max(hits + misses, 1), rows_ram=after["rows_ram"])
    point.update(ram_ms=ram_ms, tiered_ms=tiered_ms, ratio=ratio)
    print(
        f"  1/{fraction:g}: budget {budget / 2**20:,.1f} MiB, {after['rows_ram']:,} rows in RAM "
        f"(plan {entry['rows_ram']:,}); hit rate {point['hit_rate']:.3f} measured, "
        f"{entry['hit_rate']:.3f} predicted; {ram_ms:.1f} ms all-RAM, {tiered_ms:.1f} ms tiered "
        f"({point['ratio']:.2f}x)",
        flush=True,
    )
    return point


def record(benchmark: str, args, started: float, load: list, points: list, **extra) -> dict:
    """The run's result (its command, date, sizes, duration, load and points, plus `extra`),
    written to args.json (default benchmarks/results/<benchmark>.json) and returned."""
    result = {
        "benchmark": benchmark,
        "command": "python " + " ".join(sys.argv),
        "date": datetime.date.today().isoformat(),
        "keys": args.keys,
        "dim": args.dim,
        "batch": args.sweep_batch,
        **extra,
        "seconds": round(time.perf_counter() - started),
        "load_average": load,
        "points": points,
    }
    out = pathlib.Path(args.json) if args.json else RESULTS / f"{benchmark}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=int))
    print(f"  wrote {out}")
    return result


def add_arguments(parser, batch: int) -> None:
    """The sweep's options of tiered_bench.py."""
    parser.add_argument("--sweep-exponents", default="1.05,1.1,1.2", help="sweep: Zipf exponents")
    parser.add_argument("--sweep-fractions", default="2,4,10,37", help="sweep: table / budget")
    parser.add_argument("--sweep-batch", type=int, default=batch, help="sweep: ids per step")
    parser.add_argument("--sweep-warm", type=int, default=8, help="sweep: untimed steps a point")


def sweep(bench, args) -> dict:
    """The sweep over args.sweep_exponents x args.sweep_fractions; writes args.json (default
    benchmarks/results/tiered_sweep.json)."""
    exponents = [float(x) for x in args.sweep_exponents.split(",")]
    fractions = [float(x) for x in args.sweep_fractions.split(",")]
    print(
        f"sweep: {args.keys:,} keys, d = {args.dim}, Adam, {args.sweep_batch:,} Zipf ids a step, "
        f"evict_policy {args.policy!r}, {args.sweep_warm} settling steps, "
        f"{args.rounds * args.iters} timed batches (--rounds x --iters) per point, each on both "
        f"tables; load average {os.getloadavg()[0]:.1f}; prefetch: off (the prefetch mode runs it)",
        flush=True,
    )
    ram = bench._table(args.dim)
    ram_step, _ = bench._train_step(ram, args.dim)
    bench._populate(ram, ram_step, args.keys)
    points = []
    started = time.perf_counter()
    load = [os.getloadavg()[0]]
    for exponent in exponents:
        draw, probs = zipf_sampler(args.keys, exponent)
        rng = np.random.default_rng(0)
        batch_keys = int(np.mean([len(np.unique(draw(rng, args.sweep_batch))) for _ in range(4)]))
        print(f" Zipf({exponent:g}): ~{batch_keys:,} distinct keys a step", flush=True)
        for fraction in fractions:
            points.append(
                sweep_point(bench, args, exponent, fraction, ram_step, draw, probs, batch_keys)
            )
    load.append(os.getloadavg()[0])  # other processes share the cores: the load at both ends
    return record("tiered_sweep", args, started, load, points, policy=args.policy, optimizer="adam")
