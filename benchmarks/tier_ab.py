"""A tiered hash table's step in this checkout against another checkout (say, the commit before a
change to the disk tier), side by side in one process: tests/core/tier_capi.cc of each tree,
built over its own kernels/core with the system C++ compiler (no TensorFlow, one thread), the
two loaded at once and stepped in turn on the same Zipf(1.1) batches. A step is a lookup of the
batch and an update of its distinct keys (SGD into the value and two slots: the records widen as
Adam's do). Prints ms a step, rows in RAM and the RAM-tier hit rate of each, and per miss the
bytes the process read and wrote (/proc/self/io) and, with --ram (an all-RAM table of this
checkout stepped beside them), the CPU time a miss adds to the all-RAM step. With --prefetch,
each step is followed by a prefetch of the next step's batch (HashTable::Prefetch), its CPU
time printed apart (both trees' tests/core/tier_capi.cc need sok_tier_prefetch).

Usage: cd benchmarks && python tier_ab.py --baseline /path/to/other/checkout [--ram] [--prefetch]
       [--keys 2000000] [--dim 64] [--budget 400MiB] [--baseline-budget 444MiB] [--steps 20]
       [--policy lru|lfu] [--settle 150]
"""

import argparse
import ctypes
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import numpy as np
from common import io_bytes

HERE = pathlib.Path(__file__).resolve().parents[1]
BATCH = 163_840
ERR = 512


def build(tree: pathlib.Path, out: pathlib.Path) -> ctypes.CDLL:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    core = tree / "kernels" / "core"
    sources = sorted(core.glob("hash_table*.cc"))
    sources += [core / s for s in ("disk_index.cc", "open_index.cc", "row_init.cc")]
    sources += [core / "huge_pages.cc", core / "row_sum.cc"]
    sources = [str(s) for s in sources if s.exists()]
    lib = out / "libtier.so"
    cmd = [cxx, "-O3", "-std=c++17", "-shared", "-fPIC", f"-I{tree}", "-o", str(lib)]
    subprocess.run(cmd + [str(tree / "tests" / "core" / "tier_capi.cc")] + sources, check=True)
    dll = ctypes.CDLL(str(lib))  # its own handle: the two trees' symbols do not mix
    P = np.ctypeslib.ndpointer
    I64, F32 = P(np.int64, flags="C"), P(np.float32, flags="C")
    i64, s, vp = ctypes.c_int64, ctypes.c_char_p, ctypes.c_void_p
    sigs = {
        "sok_tier_create": (vp, [i64, i64, s, i64, i64, ctypes.c_int, s, i64]),
        "sok_tier_lookup": (ctypes.c_int, [vp, I64, i64, F32, s, i64]),
        "sok_tier_apply": (ctypes.c_int, [vp, I64, i64, F32, ctypes.c_float, i64, s, i64]),
        "sok_tier_add_slots": (ctypes.c_int, [vp, F32, i64, s, i64]),
        "sok_tier_stats": (None, [vp, I64]),
        "sok_tier_prefetch": (ctypes.c_int, [vp, I64, i64, ctypes.POINTER(i64), s, i64]),
        "sok_tier_free": (None, [vp]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(dll, name, None)  # None: a tree whose harness lacks it
        if fn is not None:
            fn.restype, fn.argtypes = restype, argtypes
    return dll


class Table:
    def __init__(self, lib, dim, budget, directory, lfu=False):
        self.lib, self.dim = lib, dim
        self.err = ctypes.create_string_buffer(ERR)
        args = (dim, budget, str(directory).encode(), 1, 0, int(lfu), self.err, ERR)
        self.h = lib.sok_tier_create(*args)
        assert self.h, self.err.value.decode()
        self.check(lib.sok_tier_add_slots(self.h, np.zeros(2, np.float32), 2, self.err, ERR))
        self.prefetch_s = 0.0  # CPU seconds in prefetches

    def check(self, rc):
        assert rc == 0, self.err.value.decode()

    def step(self, ids, step, coming=None):
        """A lookup of ids and an update of its keys; then, given `coming` (the next step's
        ids), a prefetch of their rows."""
        out = np.empty((ids.size, self.dim), np.float32)
        self.check(self.lib.sok_tier_lookup(self.h, ids, ids.size, out, self.err, ERR))
        unique = np.unique(ids)
        grads = np.full((unique.size, self.dim), 1e-3, np.float32)
        rc = self.lib.sok_tier_apply(self.h, unique, unique.size, grads, 0.1, step, self.err, ERR)
        self.check(rc)
        if coming is not None:
            read, start = ctypes.c_int64(), time.process_time()
            args = (self.h, coming, coming.size, ctypes.byref(read), self.err, ERR)
            self.check(self.lib.sok_tier_prefetch(*args))
            self.prefetch_s += time.process_time() - start

    def stats(self):
        out = np.zeros(9, np.int64)
        self.lib.sok_tier_stats(self.h, out)
        names = "rows_ram rows_disk bytes_ram bytes_disk ram_budget hits misses spills evictions"
        return dict(zip(names.split(), out.tolist()))


def zipf_ids(rng, keys, n, a=1.1):
    top = 1.0 - (keys + 1.0) ** (1.0 - a)
    k = (1.0 - rng.random(n) * top) ** (1.0 / (1.0 - a)) - 1.0
    return np.minimum(k.astype(np.int64), keys - 1)


def parse_bytes(text: str) -> int:
    for unit, scale in {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10}.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * scale)
    return int(text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", required=True, help="the other checkout's root")
    p.add_argument("--keys", type=int, default=2_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--budget", default="400MiB")
    p.add_argument("--baseline-budget", default=None, help="default: --budget")
    p.add_argument("--steps", type=int, default=20, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ram", action="store_true", help="also step an all-RAM table of this tree")
    p.add_argument("--prefetch", action="store_true", help="prefetch each next batch")
    p.add_argument("--policy", choices=("lru", "lfu"), default="lru", help="eviction policy")
    p.add_argument(
        "--settle",
        type=int,
        default=0,
        help="untimed steps of fresh batches before the timed ones: enough (~150 at a tenth of "
        "the table) and the tier file has grown to where cleaning keeps it",
    )
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        tables = {}
        trees = [
            ("this", HERE, args.budget),
            ("baseline", pathlib.Path(args.baseline), args.baseline_budget or args.budget),
        ]
        if args.ram:
            trees.append(("all-RAM", HERE, "1024GiB"))
        for name, tree, budget in trees:
            (tmp / name).mkdir()
            lib = build(tree, tmp / name)
            lfu = args.policy == "lfu"
            tables[name] = Table(lib, args.dim, parse_bytes(budget), tmp / name / "tier", lfu)
        keys = np.random.default_rng(0).permutation(args.keys).astype(np.int64)
        for t in tables.values():  # every key stored, then the Zipf hot set warmed up
            for i, chunk in enumerate(np.array_split(keys, max(args.keys // 16384, 1))):
                t.step(chunk, i + 1)
        rng = np.random.default_rng(1)
        batches = [zipf_ids(rng, args.keys, BATCH) for _ in range(args.steps * args.rounds + 9)]

        def coming(k):  # the batch after batches[k], when prefetching
            return batches[k + 1] if args.prefetch else None

        for t in tables.values():  # the same settling batches for each
            settle_rng = np.random.default_rng(2)
            for k in range(args.settle):
                t.step(zipf_ids(settle_rng, args.keys, BATCH), 1000 + k, None)
        step = 1000 + args.settle
        for t in tables.values():
            for k in range(8):
                step += 1
                t.step(batches[k], step, coming(k))
            t.prefetch_s = 0.0
        before = {n: t.stats() for n, t in tables.items()}
        ms = {n: [] for n in tables}
        cpu = {n: 0.0 for n in tables}  # seconds over all rounds
        io = {n: np.zeros(2, np.int64) for n in tables}  # bytes read, written
        for r in range(args.rounds):
            first = 8 + r * args.steps
            for name, t in tables.items():
                start, cpu0, io0 = time.perf_counter(), time.process_time(), io_bytes()
                for i in range(args.steps):
                    t.step(batches[first + i], step + i + 1, coming(first + i))
                ms[name].append((time.perf_counter() - start) * 1e3 / args.steps)
                cpu[name] += time.process_time() - cpu0
                io[name] += np.subtract(io_bytes(), io0)
            step += args.steps
        print(
            f"{args.keys:,} keys, d = {args.dim} + 2 slots, {BATCH:,} Zipf(1.1) ids a step, "
            f"{args.policy}, "
            f"{args.rounds} rounds of {args.steps} steps in turn"
        )
        for name, t in tables.items():
            s, b = t.stats(), before[name]
            hits, misses = s["hits"] - b["hits"], s["misses"] - b["misses"]
            rounds = ", ".join(f"{m:.1f}" for m in ms[name])
            print(
                f"  {name:8s} budget {s['ram_budget'] / 2**20:.0f} MiB: "
                f"{np.median(ms[name]):7.2f} ms a step (rounds {rounds}), "
                f"{s['rows_ram']:,} rows in RAM, hit rate {hits / max(hits + misses, 1):.4f}, "
                f"{misses / (args.rounds * args.steps):,.0f} misses a step"
            )
            steps = args.rounds * args.steps
            line = f"    CPU {cpu[name] * 1e3 / steps:.1f} ms a step"
            if args.prefetch:
                line += f", of which prefetching {t.prefetch_s * 1e3 / steps:.1f} ms"
            print(line)
            if misses and name != "all-RAM":
                extra = ""
                if args.ram:
                    added = (cpu[name] - cpu["all-RAM"]) * 1e6 / misses
                    extra = f", {added:.2f} CPU-us a miss over the all-RAM step"
                print(
                    f"    per miss: {io[name][0] / misses:,.0f} bytes read, "
                    f"{io[name][1] / misses:,.0f} bytes written{extra}"
                )


if __name__ == "__main__":
    main()
