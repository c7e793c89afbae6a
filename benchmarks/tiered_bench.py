"""A hash table larger than its RAM budget: memory, step time and disk throughput.

Usage: cd benchmarks && python tiered_bench.py [rss|zipf|uniform|scale|all] [options]

rss      A tiered table trained on new keys until it holds 4x its RAM budget, then on Zipf(1.1)
         batches over them with each next batch prefetched. RSS between steps against the
         budget plus TF's own (the same steps on an all-RAM table, less that table's bytes;
         each in a fresh process).
zipf     One training step (lookup + gradient + Adam, 163,840 Zipf(1.1) ids, d = 64) on a
         tiered table whose budget holds the hot set, against the same step on an all-RAM
         table holding the same rows. Both tables hold --keys rows before timing.
uniform  The same step on uniform ids, the tier's page cache dropped before every step: rows
         read back from disk per second against the disk's own random 4 KiB read rate.
scale    --scale-keys keys (default 55M: 10.6 GB of rows and Adam slots at d = 16), a 2 GiB
         budget, --scale-steps steps (default 1,000): batches of new keys until every key is
         stored, then Zipf(1.1) ids over all of them; sok.dump, sok.load on 2 ranks
         (horovodrun, gloo; --scale-reload-budget each, default half the budget) and a dump
         there, and the two dumps compared row by row.
sweep    Budgets of 1/2, 1/4, 1/10 and 1/37 of the table's rows and slots x Zipf 1.05, 1.1, 1.2:
         measured and predicted (sok.plan_memory) hit rate, step time tiered vs all-RAM
         (tiered_sweep.py); writes benchmarks/results/tiered_sweep.json unless --json.
prefetch model.fit on fresh Zipf batches at budgets of 1/10 and 1/4 of the table: all-RAM,
         tiered, and tiered through sok.keras.prefetch_rows; wall and whole-process CPU time per
         step and hit rate (tiered_prefetch.py); writes benchmarks/results/tiered_prefetch.json.

Each figure prints with the command-line settings that produced it; docs/benchmarks.md records
them.
"""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tiered_prefetch  # noqa: E402
import tiered_sweep  # noqa: E402
from common import io_bytes, memory_setting  # noqa: E402
from storage_engine_bench import raw_random_reads  # noqa: E402

BATCH = 163_840


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _parse_bytes(text: str) -> int:
    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "": 1}
    for unit, scale in units.items():
        if unit and text.endswith(unit):
            return int(float(text[: -len(unit)]) * scale)
    return int(text)


def _table(dim, storage=None, seed=1, policy="lru"):
    import keras

    import sok_lite as sok

    return sok.DynamicVariable(
        dim,
        initializer=keras.initializers.RandomNormal(stddev=0.05, seed=seed),
        storage=storage,
        evict_policy=policy,
        name="tiered_bench",
    )


def _train_step(table, dim, lr=0.001):
    """A tf.function: lookup of a [n, 1] ragged batch, a loss, its gradient and Adam."""
    import keras
    import numpy as np
    import tensorflow as tf

    import sok_lite as sok

    proj = tf.constant(np.random.default_rng(0).standard_normal([dim, 1]).astype(np.float32))
    opt = keras.optimizers.Adam(lr)

    @tf.function
    def step(ids):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.matmul(sok.lookup_sparse(table, ids), proj))
        grad = tape.gradient(loss, table)
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(grad, table)])
        return loss

    return step, opt


def _ragged(ids):
    import tensorflow as tf

    return tf.RaggedTensor.from_tensor(tf.constant(ids.reshape(-1, 1)))


def _drop_page_cache(directory: pathlib.Path) -> None:
    """Asks the kernel to forget the cached pages of every file under `directory`."""
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


# -- rss ---------------------------------------------------------------------------------------


def _rss_child(args) -> dict:
    """Runs in a fresh process: trains a table on new keys until a tiered one holds `fill` x the
    budget (or on --rss-keys keys), then --rss-steps Zipf(1.1) steps over those keys, each
    followed by sok.prefetch of the next batch. Returns RSS and the table's own bytes in RAM
    between steps, and the peak RSS. --rss-ram: the same steps on an all-RAM table (the
    baseline: what TF and the allocators keep for these steps beside the table)."""
    import numpy as np

    import sok_lite as sok

    budget = _parse_bytes(args.budget)
    root = pathlib.Path(tempfile.mkdtemp(prefix="tiered_rss_", dir=args.dir))
    try:
        storage = None if args.rss_ram else sok.storage.Disk(str(root), ram_budget=budget)
        table = _table(args.dim, storage)
        step, _ = _train_step(table, args.dim)
        step(_ragged(np.zeros([1], np.int64)))

        def between() -> list:  # RSS and the table's bytes in RAM, between steps
            return [_status_kib("VmRSS") * 1024, int(table.memory_stats()["bytes_ram"])]

        def stored() -> int:
            return int(table.memory_stats()["bytes_ram"]) + _disk_bytes(table)

        key, fill = 0, []
        while (key < args.rss_keys) if args.rss_keys else (stored() < args.fill * budget):
            n = min(args.batch, 1_000_000, (args.rss_keys - key) if args.rss_keys else 1 << 62)
            step(_ragged(np.arange(key, key + n, dtype=np.int64)))
            key += n
            fill.append(between())
        rng = np.random.default_rng(0)
        zipf, batch = [], _zipf_ids(rng, key, args.batch)
        for _ in range(args.rss_steps):  # batches drawn one ahead: only two held at a time
            step(_ragged(batch))
            batch = _zipf_ids(rng, key, args.batch)
            sok.prefetch(table, _ragged(batch), wait_for_lookup=False)
            zipf.append(between())
        return {
            "keys": key,
            "fill": fill,
            "zipf": zipf,
            "peak_rss": _status_kib("VmHWM") * 1024,
            "stats": table.memory_stats(),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _disk_bytes(table) -> int:
    return int(table.memory_stats()["bytes_disk"])


def _child(mode: str, args) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, "--dim", str(args.dim)]
    cmd += ["--budget", args.budget, "--fill", str(args.fill), "--batch", str(args.batch)]
    cmd += ["--rss-steps", str(args.rss_steps), "--rss-keys", str(args.rss_keys)]
    cmd += ["--rss-ram"] if args.rss_ram else []
    if args.dir:
        cmd += ["--dir", args.dir]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def rss(args) -> dict:
    import numpy as np

    budget = _parse_bytes(args.budget)
    full = _child("rss", args)
    ram = _child(
        "rss", argparse.Namespace(**{**vars(args), "rss_ram": True, "rss_keys": full["keys"]})
    )
    # TF's own: what the same steps keep in RSS beside an all-RAM table's own bytes (the
    # batch's tensors and what TF's and glibc's allocators keep of them).
    tf_own = float(np.median([r - b for r, b in ram["zipf"] or ram["fill"]]))
    settled = max(r for r, _ in full["fill"] + full["zipf"]) - tf_own
    peak = full["peak_rss"] - (ram["peak_rss"] - ram["stats"]["bytes_ram"])
    s = full["stats"]
    print(
        f"rss: d = {args.dim}, Adam, budget {_mib(budget)}, {full['keys']:,} new keys "
        f"({args.fill}x the budget), then {args.rss_steps} Zipf(1.1) steps over them, each "
        "followed by sok.prefetch of the next batch"
    )
    print(
        f"  TF's own: the same steps on an all-RAM table keep {_mib(tf_own)} of RSS beside the "
        f"table's {_mib(ram['stats']['bytes_ram'])} (median between Zipf steps)"
    )
    print(
        f"  tiered: {_mib(s['bytes_ram'])} in RAM, {_mib(s['bytes_disk'])} on disk, "
        f"{s['misses']:,} misses; peak RSS {_mib(full['peak_rss'])}"
    )
    print(
        f"  RSS between steps (most) - TF's own = {_mib(settled)}, {settled / budget:.2f}x the "
        f"budget (target <= 1.2x: {'met' if settled <= 1.2 * budget else 'NOT met'})"
    )
    print(
        f"  peak RSS within a step - the all-RAM run's peak beside its table = {_mib(peak)}, "
        f"{peak / budget:.2f}x the budget"
    )
    return {
        "budget": budget,
        "tf_own": tf_own,
        "settled": settled,
        "peak": peak,
        "full": full,
        "ram": ram,
    }


# -- zipf / uniform ----------------------------------------------------------------------------


def _populate(table, step, keys: int, chunk: int = 200_000) -> None:
    """Looks up and steps keys 0..keys-1 once, so that every row and its slots exist."""
    import numpy as np

    for start in range(0, keys, chunk):
        step(_ragged(np.arange(start, min(start + chunk, keys), dtype=np.int64)))


def _zipf_batches(rng, keys, count, a):
    """Ids with P(key k) proportional to (k + 1)^-a over [0, keys): the hot set is the low
    keys. Bounded, not numpy's zipf modulo keys, whose tail (22% of draws at a = 1.1 and 2M
    keys) would wrap around into uniform ids."""
    import numpy as np

    cdf = np.cumsum(np.arange(1, keys + 1, dtype=np.float64) ** -a)
    cdf /= cdf[-1]
    return [np.searchsorted(cdf, rng.random(BATCH)).astype(np.int64) for _ in range(count)]


_next_batch: dict = {}


def _time(step, batches, iters, before=None) -> float:
    """Median ms of `iters` steps, each on the next of `batches` (a cycle shared by all calls
    for the same list, so that later calls see batches the earlier ones did not)."""
    import numpy as np

    times = []
    for _ in range(iters):
        i = _next_batch[id(batches)] = _next_batch.get(id(batches), -1) + 1
        ids = batches[i % len(batches)]
        ragged = _ragged(ids)
        if before:
            before()
        start = time.perf_counter()
        step(ragged)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def zipf(args) -> dict:
    import numpy as np

    import sok_lite as sok

    budget = _parse_bytes(args.budget)
    rng = np.random.default_rng(0)
    batches = _zipf_batches(rng, args.keys, 64, 1.1)
    root = pathlib.Path(tempfile.mkdtemp(prefix="tiered_zipf_", dir=args.dir))
    try:
        disk = sok.storage.Disk(str(root), ram_budget=budget)
        tiered = _table(args.dim, disk, policy=args.policy)
        ram = _table(args.dim)
        tiered_step, _ = _train_step(tiered, args.dim)
        ram_step, _ = _train_step(ram, args.dim)
        _populate(tiered, tiered_step, args.keys)
        _populate(ram, ram_step, args.keys)
        for step in (tiered_step, ram_step):  # warm: the hot set comes back to RAM
            _time(step, batches, 8)
        before = dict(tiered.memory_stats())
        ram_ms, tiered_ms = [], []
        cpu = {"ram": 0.0, "tiered": 0.0}  # process CPU seconds, every thread
        io = [0, 0]  # bytes the tiered steps read and wrote through system calls
        for _ in range(args.rounds):
            start = time.process_time()
            ram_ms.append(_time(ram_step, batches, args.iters))
            cpu["ram"] += time.process_time() - start
            start, io_start = time.process_time(), io_bytes()
            tiered_ms.append(_time(tiered_step, batches, args.iters))
            cpu["tiered"] += time.process_time() - start
            io = [a + b - c for a, b, c in zip(io, io_bytes(), io_start)]
        after = tiered.memory_stats()
        ram_ms, tiered_ms = float(np.median(ram_ms)), float(np.median(tiered_ms))
        hits = after["hits"] - before["hits"]
        misses = after["misses"] - before["misses"]
        # Per missed id: the tier's CPU (the tiered steps' CPU beyond the all-RAM steps') and
        # the bytes read and written (page cache included, so without a disk read too).
        per_miss = {
            "cpu_us": (cpu["tiered"] - cpu["ram"]) * 1e6 / max(misses, 1),
            "read_bytes": io[0] / max(misses, 1),
            "written_bytes": io[1] / max(misses, 1),
        }
        unique = int(np.mean([len(np.unique(b)) for b in batches]))
        print(
            f"zipf: {BATCH:,} Zipf(1.1) ids (~{unique:,} unique) over {args.keys:,} keys, "
            f"d = {args.dim}, Adam; budget {_mib(budget)}, evict_policy {args.policy!r} "
            f"({after['rows_ram']:,} rows in RAM, {after['rows_disk']:,} on disk)"
        )
        print(f"  all-RAM table  {ram_ms:8.2f} ms/step")
        print(f"  tiered table   {tiered_ms:8.2f} ms/step")
        print(
            f"  tiered / RAM: {tiered_ms / ram_ms:.2f}x (target <= 1.5x); RAM-tier hit rate "
            f"{hits / max(hits + misses, 1):.3f}"
        )
        steps = args.rounds * args.iters
        print(
            f"  per missed id ({misses / steps:,.0f} a step): {per_miss['cpu_us']:.2f} us of CPU "
            f"beyond the all-RAM step, {per_miss['read_bytes']:,.0f} bytes read, "
            f"{per_miss['written_bytes']:,.0f} written; {memory_setting()}"
        )
        return {
            "ram_ms": ram_ms,
            "tiered_ms": tiered_ms,
            "per_miss": per_miss,
            "hit_rate": hits / max(hits + misses, 1),
            "stats": after,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def uniform(args) -> dict:
    import numpy as np

    import sok_lite as sok

    budget = _parse_bytes(args.budget)
    rng = np.random.default_rng(1)
    batches = [rng.integers(0, args.keys, BATCH) for _ in range(4)]
    root = pathlib.Path(tempfile.mkdtemp(prefix="tiered_uniform_", dir=args.dir))
    try:
        tiered = _table(args.dim, sok.storage.Disk(str(root), ram_budget=budget))
        step, _ = _train_step(tiered, args.dim)
        _populate(tiered, step, args.keys)
        # The physical limit, on the tier's own file: one reader, as the tier reads.
        tier_file = next(root.rglob("rows.bin"))
        rate, _ = raw_random_reads(str(tier_file), tier_file.stat().st_size, 1, 5.0, 0)
        before = dict(tiered.memory_stats())
        ms = _time(step, batches, args.iters, before=lambda: _drop_page_cache(root))
        after = tiered.memory_stats()
        misses = (after["misses"] - before["misses"]) / args.iters
        rows_per_s = misses / (ms / 1e3)
        print(
            f"uniform: {BATCH:,} uniform ids over {args.keys:,} keys, d = {args.dim}, Adam, "
            f"budget {_mib(budget)}, page cache dropped before each step"
        )
        print(f"  step {ms:.1f} ms, {misses:,.0f} rows read back from disk per step")
        print(
            f"  {rows_per_s:,.0f} rows/s against the disk's {rate:,.0f} random 4 KiB reads/s: "
            f"{rows_per_s / rate:.2f} of the physical limit (aim >= 0.5)"
        )
        return {"ms": ms, "rows_per_s": rows_per_s, "disk_reads_per_s": rate}
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- scale -------------------------------------------------------------------------------------

_RELOAD_WORKER = """
import sys
import horovod.tensorflow as hvd
import keras
import sok_lite as sok
hvd.init()
sok.init("horovod")
dump, out, tier, budget, dim = sys.argv[1:6]
table = sok.DynamicVariable(
    int(dim), initializer=keras.initializers.RandomNormal(stddev=0.05, seed=1),
    storage=sok.storage.Disk(tier, ram_budget=int(budget)), name="tiered_bench")
opt = keras.optimizers.Adam(0.001)
sok.load(dump, [table], opt)
sok.dump(out, [table], opt)
print("rank", sok.rank(), "rows", int(table.size()), table.memory_stats())
"""


def _dump_rows(path: pathlib.Path):
    """(keys, rows memmap) of every rank's file of table 0 in a sok.dump directory."""
    import numpy as np

    manifest = json.loads((path / "manifest.json").read_text())
    keys, rows = [], []
    for name, meta in sorted(manifest["files"].items()):
        if name.endswith(".rows") and meta["rows"]:
            stem = name[: -len(".rows")]
            keys.append(np.fromfile(path / f"{stem}.ids", "<i8"))
            rows.append(
                np.memmap(path / name, "<f4", mode="r", shape=(meta["rows"], meta["width"]))
            )
    return keys, rows


def _same_dumps(a: pathlib.Path, b: pathlib.Path, chunk: int = 1 << 20) -> bool:
    import numpy as np

    def sorted_view(path):
        keys, rows = _dump_rows(path)
        # (file, position) of every key, in key order.
        file_of = np.concatenate([np.full(len(k), i, np.int32) for i, k in enumerate(keys)])
        pos = np.concatenate([np.arange(len(k)) for k in keys])
        all_keys = np.concatenate(keys)
        order = np.argsort(all_keys, kind="stable")
        return all_keys[order], file_of[order], pos[order], rows

    ka, fa, pa, ra = sorted_view(a)
    kb, fb, pb, rb = sorted_view(b)
    if not np.array_equal(ka, kb):
        return False
    for start in range(0, len(ka), chunk):
        sl = slice(start, start + chunk)

        def gather(files, positions, rows):
            out = np.empty((len(files), rows[0].shape[1]), np.float32)
            for i, r in enumerate(rows):
                mask = files == i
                out[mask] = r[positions[mask]]
            return out

        if not np.array_equal(gather(fa[sl], pa[sl], ra), gather(fb[sl], pb[sl], rb)):
            return False
    return True


def _zipf_ids(rng, keys: int, n: int, a: float = 1.1):
    """n ids in [0, keys) with P(k) ~ (k + 1)^-a, by the inverse of the continuous CDF (no
    table of `keys` entries: the scale run's key space is too large for one)."""
    import numpy as np

    top = 1.0 - (keys + 1.0) ** (1.0 - a)
    k = (1.0 - rng.random(n) * top) ** (1.0 / (1.0 - a)) - 1.0
    return np.minimum(k.astype(np.int64), keys - 1)


def scale(args) -> dict:
    import numpy as np

    import sok_lite as sok

    budget = _parse_bytes(args.scale_budget)
    # Each of the 2 reloading ranks: half the budget unless given (a larger one keeps more rows
    # in RAM and fewer on disk beside the two dumps).
    reload_budget = _parse_bytes(args.scale_reload_budget or str(budget // 2))
    dim = args.scale_dim
    root = pathlib.Path(tempfile.mkdtemp(prefix="tiered_scale_", dir=args.dir))
    try:
        table = _table(dim, sok.storage.Disk(str(root / "tier1"), ram_budget=budget))
        step, opt = _train_step(table, dim)
        rng = np.random.default_rng(2)
        fill_steps = -(-args.scale_keys // BATCH)
        start = time.perf_counter()
        before_zipf = None
        for i in range(args.scale_steps):
            if i < fill_steps:  # every key of the key space once, a batch of new keys a step
                ids = np.arange(i * BATCH, min((i + 1) * BATCH, args.scale_keys), dtype=np.int64)
            else:  # then Zipf(1.1) over all of them
                if before_zipf is None:
                    before_zipf = dict(table.memory_stats())
                ids = _zipf_ids(rng, args.scale_keys, BATCH)
            step(_ragged(ids))
            if (i + 1) % max(args.scale_steps // 20, 1) == 0:
                s = table.memory_stats()
                print(
                    f"  step {i + 1}: {int(table.size()):,} rows, {_mib(s['bytes_ram'])} in RAM, "
                    f"{_mib(s['bytes_disk'])} on disk, RSS {_mib(_status_kib('VmRSS') * 1024)}, "
                    f"peak {_mib(_status_kib('VmHWM') * 1024)}, "
                    f"{time.perf_counter() - start:.0f} s",
                    flush=True,
                )
        train_s = time.perf_counter() - start
        stats = table.memory_stats()
        hit_rate = None
        if before_zipf is not None:
            hits = stats["hits"] - before_zipf["hits"]
            hit_rate = hits / max(hits + stats["misses"] - before_zipf["misses"], 1)
        rows = int(table.size())
        start = time.perf_counter()
        sok.dump(str(root / "dump1"), [table], opt)
        dump_s = time.perf_counter() - start
        peak = _status_kib("VmHWM") * 1024
        del table, step
        shutil.rmtree(root / "tier1", ignore_errors=True)  # room on the disk for the reload
        start = time.perf_counter()
        worker = root / "reload_worker.py"
        worker.write_text(_RELOAD_WORKER)
        horovodrun = shutil.which("horovodrun") or str(
            pathlib.Path(sys.executable).parent / "horovodrun"
        )
        subprocess.run(
            [
                horovodrun,
                "-np",
                "2",
                "-H",
                "localhost:2",
                "--gloo",
                sys.executable,
                str(worker),
                str(root / "dump1"),
                str(root / "dump2"),
                str(root / "tier2"),
                str(reload_budget),
                str(dim),
            ],
            check=True,
        )
        reload_s = time.perf_counter() - start
        same = _same_dumps(root / "dump1", root / "dump2")
        print(
            f"scale: {args.scale_keys:,} keys, d = {dim}, Adam, budget {_mib(budget)}, "
            f"{args.scale_steps:,} steps of {BATCH:,} ids ({min(fill_steps, args.scale_steps)} "
            "of new keys, then Zipf(1.1) over all keys)"
        )
        print(
            f"  {rows:,} rows ({_mib(stats['bytes_ram'])} in RAM, {_mib(stats['bytes_disk'])} "
            f"on disk), train {train_s:.0f} s, peak RSS {_mib(peak)}, dump {dump_s:.0f} s, "
            f"RAM-tier hit rate of the Zipf steps "
            f"{hit_rate if hit_rate is None else round(hit_rate, 3)}"
        )
        print(
            f"  reload on 2 ranks (budget {_mib(reload_budget)} each) and dump: {reload_s:.0f} s; "
            f"values and slots identical: {same}"
        )
        return {
            "rows": rows,
            "train_s": train_s,
            "dump_s": dump_s,
            "reload_s": reload_s,
            "reload_budget": reload_budget,
            "peak_rss": peak,
            "hit_rate": hit_rate,
            "stats": stats,
            "identical": same,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "mode",
        nargs="?",
        default="all",
        choices=["rss", "zipf", "uniform", "scale", "sweep", "prefetch", "all"],
    )
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--keys", type=int, default=2_000_000, help="rows in the zipf/uniform tables")
    p.add_argument("--budget", default="400MiB", help="RAM budget of rss/zipf/uniform tables")
    p.add_argument("--fill", type=float, default=4.0, help="rss: table size / budget")
    p.add_argument("--batch", type=int, default=BATCH, help="rss: new keys per step")
    p.add_argument("--rss-steps", type=int, default=20, help="rss: Zipf steps after the fill")
    p.add_argument("--rss-keys", type=int, default=0, help="rss: keys to fill (0: --fill)")
    p.add_argument("--rss-ram", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument(
        "--policy", default="lru", choices=["lru", "lfu"], help="zipf: the tiered table's spills"
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", default=None, help="where the tier files go (default: the temp dir)")
    p.add_argument("--scale-keys", type=int, default=55_000_000)
    p.add_argument("--scale-dim", type=int, default=16)
    p.add_argument("--scale-budget", default="2GiB")
    p.add_argument("--scale-steps", type=int, default=1000)
    p.add_argument("--scale-reload-budget", help="each reloading rank's (default: half of it)")
    tiered_sweep.add_arguments(p, BATCH)
    tiered_prefetch.add_arguments(p)
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(_rss_child(args)))
        return
    if args.mode == "sweep":
        tiered_sweep.sweep(sys.modules[__name__], args)
        return
    if args.mode == "prefetch":
        tiered_prefetch.run(sys.modules[__name__], args)
        return
    results = {}
    modes = ["rss", "zipf", "uniform"] if args.mode == "all" else [args.mode]
    for mode in modes:
        results[mode] = {"rss": rss, "zipf": zipf, "uniform": uniform, "scale": scale}[mode](args)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1, default=int))


if __name__ == "__main__":
    main()
