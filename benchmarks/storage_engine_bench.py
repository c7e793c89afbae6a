"""The disk tier's storage engine: LMDB against a file of fixed-size row records.

Usage: python benchmarks/storage_engine_bench.py [--rows 1000000] [--steps 2] [--dir DIR]

Both engines hold the same table on disk, driven from Python with batch calls and NumPy:
- "lmdb": the `lmdb` package (a B+tree in a memory-mapped file, as TorchRec's SSD tier), keys
  as 8-byte big-endian ints so that key order is numeric order, one record per key, reads with
  Cursor.getmulti and writes with Cursor.putmulti in one write transaction per step.
- "chunk": one file of fixed-size records, record r of key r at offset r * RECORD (the RAM
  index is then an array; a hash table keeps key -> record the same way), reads and writes as
  os.preadv / os.pwritev over the offsets sorted, records less than --gap-bytes apart merged
  into one call with the records between them (they share disk pages: the disk reads them
  anyway), reads spread over --threads threads (the syscalls release the GIL and wait on the
  disk), the step's records written back into the spans they were read in; the kernel's
  readahead (--advice random turns it off with POSIX_FADV_RANDOM, as LMDB's readahead=False).

A record is the key, the row and Adam's two slots (3 x 64 float32) and three int64 of
metadata: 800 bytes. The table is --ram-factor times the simulated RAM tier. A step draws
163,840 ids (Zipf(1.1) or uniform), finds the unique ids the RAM tier lacks (an LRU over
steps, kept in NumPy), reads their records from the engine, changes them (a row update) and
writes them back (read-modify-write), then admits them to the RAM tier. Warm-up steps fill
the RAM tier; before every timed step the data files are fsynced and their page cache dropped
(posix_fadvise DONTNEED), so that reads come from the disk.

The physical limit: random 4 KiB reads of the chunk file with O_DIRECT into an aligned buffer
(or cache-dropped pread if O_DIRECT is refused), at queue depth 1 and at --threads. Uniform ids
are reported against it as rows/s = 4 KiB reads/s x (missed rows / 4 KiB pages they touch).
"""

import argparse
import concurrent.futures
import mmap
import os
import shutil
import tempfile
import time

import numpy as np

DIM = 64
IDS_PER_STEP = 163_840
META = 3  # int64: last seen step, lookup count, last update step
RECORD_DTYPE = np.dtype(
    [("key", "<i8"), ("row", "<f4", (3 * DIM,)), ("meta", "<i8", (META,))], align=False
)
RECORD = RECORD_DTYPE.itemsize  # 800 bytes
PAGE = 4096


def drop_cache(path: str) -> None:
    """Writes `path` to disk and drops its pages from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def initial_records(keys: np.ndarray) -> np.ndarray:
    rec = np.zeros(len(keys), RECORD_DTYPE)
    rec["key"] = keys
    rec["row"][:, :DIM] = (keys % 1000)[:, None] * 1e-3
    return rec


def runs(sorted_keys: np.ndarray) -> list[tuple[int, int]]:
    """(first key, count) of each run of consecutive keys."""
    if len(sorted_keys) == 0:
        return []
    breaks = np.flatnonzero(np.diff(sorted_keys) != 1) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [len(sorted_keys)]])
    return list(zip(sorted_keys[starts].tolist(), (ends - starts).tolist()))


def spans(sorted_keys: np.ndarray, gap: int) -> list[tuple[int, int, int]]:
    """(first key, last key + 1, index of its first key) of each span of keys whose
    neighbours are at most `gap` records apart."""
    if len(sorted_keys) == 0:
        return []
    breaks = np.flatnonzero(np.diff(sorted_keys) > gap + 1) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [len(sorted_keys)]])
    firsts = sorted_keys[starts].tolist()
    lasts = (sorted_keys[ends - 1] + 1).tolist()
    return list(zip(firsts, lasts, starts.tolist()))


class ChunkFile:
    """Fixed-size records at key * RECORD, read and written by sorted offsets in spans: records
    less than `gap_bytes` apart are read (and written back) in one call with the records
    between them, which share their disk pages."""

    name = "chunk file (preadv/pwritev, sorted)"

    def __init__(self, directory, rows: int, threads: int, gap_bytes: int = PAGE, advice="normal"):
        self.path = os.path.join(directory, "rows.bin")
        keys = np.arange(rows, dtype=np.int64)
        with open(self.path, "wb") as f:
            for start in range(0, rows, 1 << 17):
                f.write(initial_records(keys[start : start + (1 << 17)]).tobytes())
        self.fd = os.open(self.path, os.O_RDWR)
        if advice == "random":
            # No readahead, as LMDB's readahead=False: otherwise the kernel may read up to
            # 128 KiB around a miss. The advice belongs to this descriptor.
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_RANDOM)
        self.pool = concurrent.futures.ThreadPoolExecutor(threads)
        self.threads = threads
        self.gap = gap_bytes // RECORD
        self._read = None  # (sorted keys, [(first key, span buffer)]) of the last read

    def files(self) -> list[str]:
        return [self.path]

    def drop_cache(self) -> None:
        drop_cache(self.path)

    def read(self, keys: np.ndarray) -> np.ndarray:
        keys = np.sort(keys)
        parts = spans(keys, self.gap)
        buffers = [np.empty(last - first, RECORD_DTYPE) for first, last, _ in parts]

        def read_share(share):
            for i in share:
                first, buf = parts[i][0], buffers[i]
                got = os.preadv(self.fd, [memoryview(buf.view(np.uint8))], first * RECORD)
                assert got == buf.nbytes, "short read"

        shares = np.array_split(np.arange(len(parts)), self.threads)
        list(self.pool.map(read_share, shares))
        self._read = (keys, [(first, buf) for (first, _, _), buf in zip(parts, buffers)])
        if not parts:
            return np.empty(0, RECORD_DTYPE)
        starts = [start for _, _, start in parts] + [len(keys)]
        return np.concatenate(
            [buf[keys[starts[i] : starts[i + 1]] - first] for i, (first, buf) in enumerate(
                self._read[1])]
        )  # fmt: skip

    def write(self, records: np.ndarray) -> None:
        records = np.sort(records, order="key")
        keys = records["key"]
        if self._read is not None and np.array_equal(self._read[0], keys):
            # The records of the last read: back into its spans, each span one call.
            at = 0
            for first, buf in self._read[1]:
                n = np.searchsorted(keys, first + len(buf)) - at
                buf[keys[at : at + n] - first] = records[at : at + n]
                at += n
            writes = [(first, buf) for first, buf in self._read[1]]
        else:
            writes = [
                (first, records[start : start + count])
                for (first, count), start in zip(
                    runs(keys), np.cumsum([0] + [c for _, c in runs(keys)])[:-1].tolist()
                )
            ]
        # One thread: writes land in the page cache, and threads would only queue for the GIL.
        for first, buf in writes:
            os.pwritev(self.fd, [memoryview(buf.view(np.uint8))], first * RECORD)
        self._read = None

    def sync(self) -> None:
        os.fsync(self.fd)

    def close(self) -> None:
        self.pool.shutdown()
        os.close(self.fd)


class Lmdb:
    """One LMDB record per key, batch reads and writes in key order."""

    name = "LMDB (getmulti/putmulti)"

    def __init__(self, directory: str, rows: int):
        import lmdb

        self.lmdb = lmdb
        self.dir = os.path.join(directory, "lmdb")
        self.map_size = 4 * rows * (RECORD + 64) + (1 << 26)
        self.env = self._open()
        keys = np.arange(rows, dtype=np.int64)
        for start in range(0, rows, 1 << 16):
            chunk = initial_records(keys[start : start + (1 << 16)])
            with self.env.begin(write=True) as txn:
                txn.cursor().putmulti(self._items(chunk), append=True)
        self.env.sync(True)

    def _open(self):
        # Not synced per commit: a cache tier needs no durability; sync() flushes per step.
        return self.lmdb.open(
            self.dir, map_size=self.map_size, sync=False, metasync=False, readahead=False
        )

    def drop_cache(self) -> None:
        """Empties the page cache of the data file. Pages mapped by the open environment would
        stay cached (the kernel does not drop mapped pages), so it is closed first."""
        self.env.close()
        for path in self.files():
            drop_cache(path)
        self.env = self._open()

    @staticmethod
    def _keys(keys: np.ndarray) -> list[bytes]:
        big_endian = np.sort(keys).astype(">i8")
        return [big_endian[i : i + 1].tobytes() for i in range(len(big_endian))]

    @staticmethod
    def _items(records: np.ndarray) -> list[tuple[bytes, bytes]]:
        raw = records.tobytes()
        big_endian = records["key"].astype(">i8").tobytes()
        return [
            (big_endian[8 * i : 8 * i + 8], raw[RECORD * i : RECORD * (i + 1)])
            for i in range(len(records))
        ]

    def files(self) -> list[str]:
        return [os.path.join(self.dir, "data.mdb")]

    def read(self, keys: np.ndarray) -> np.ndarray:
        with self.env.begin() as txn:
            found = txn.cursor().getmulti(self._keys(keys))
        assert len(found) == len(keys), "missing keys"
        return np.frombuffer(b"".join(v for _, v in found), RECORD_DTYPE).copy()

    def write(self, records: np.ndarray) -> None:
        records = np.sort(records, order="key")
        with self.env.begin(write=True) as txn:
            txn.cursor().putmulti(self._items(records))

    def sync(self) -> None:
        self.env.sync(True)

    def close(self) -> None:
        self.env.close()


class RamTier:
    """Which keys the simulated RAM tier holds: the `budget` most recently seen (by step)."""

    def __init__(self, rows: int, budget: int):
        self.resident = np.zeros(rows, bool)
        self.last_seen = np.full(rows, -1, np.int64)
        self.budget = budget

    def step(self, unique: np.ndarray, step: int) -> np.ndarray:
        """Marks `unique` seen; returns those that were not resident (the disk reads)."""
        missing = unique[~self.resident[unique]]
        self.last_seen[unique] = step
        self.resident[missing] = True
        resident = np.flatnonzero(self.resident)
        excess = len(resident) - self.budget
        if excess > 0:
            oldest = np.argpartition(self.last_seen[resident], excess - 1)[:excess]
            self.resident[resident[oldest]] = False
        return missing


def draw_ids(rng, kind: str, rows: int) -> np.ndarray:
    if kind == "uniform":
        return rng.integers(0, rows, IDS_PER_STEP)
    # Zipf(1.1) ranks, scattered over the keys so that hot keys are not neighbours on disk.
    ranks = (rng.zipf(1.1, IDS_PER_STEP) - 1) % rows
    return (ranks * 2_654_435_761) % rows


def run_engine(engine, kind: str, rows: int, budget: int, warmup: int, steps: int, seed: int):
    rng = np.random.default_rng(seed)
    tier = RamTier(rows, budget)
    totals = {"misses": 0, "pages": 0, "read_s": 0.0, "write_s": 0.0, "sync_s": 0.0}
    for step in range(warmup + steps):
        unique = np.unique(draw_ids(rng, kind, rows))
        missing = tier.step(unique, step)
        timed = step >= warmup
        if timed:
            engine.drop_cache()
        t0 = time.perf_counter()
        records = engine.read(missing)
        t1 = time.perf_counter()
        assert np.array_equal(np.sort(records["key"]), np.sort(missing)), "wrong records"
        records["row"][:, :DIM] += 1e-3  # the update: RAM-tier rows get it in place
        records["meta"][:, 2] = step
        t2 = time.perf_counter()
        engine.write(records)
        t3 = time.perf_counter()
        engine.sync()
        t4 = time.perf_counter()
        if timed:
            totals["misses"] += len(missing)
            totals["pages"] += len(np.unique(missing * RECORD // PAGE))
            totals["read_s"] += t1 - t0
            totals["write_s"] += t3 - t2
            totals["sync_s"] += t4 - t3
    return totals


def raw_random_reads(path: str, size: int, threads: int, seconds: float, seed: int) -> float:
    """4 KiB random reads per second of `path` (O_DIRECT when the filesystem allows it)."""
    pages = size // PAGE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        direct = True
    except (OSError, AttributeError):
        fd = os.open(path, os.O_RDONLY)
        direct = False
    drop_cache(path)
    rng = np.random.default_rng(seed)
    deadline = time.perf_counter() + seconds

    def worker(offsets):
        buf = mmap.mmap(-1, PAGE)  # page-aligned, as O_DIRECT requires
        done = 0
        for page in offsets:
            if done % 256 == 0 and time.perf_counter() > deadline:
                break
            if not direct:  # every read must reach the disk
                os.posix_fadvise(fd, int(page) * PAGE, PAGE, os.POSIX_FADV_DONTNEED)
            os.preadv(fd, [buf], int(page) * PAGE)
            done += 1
        return done

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        jobs = [pool.submit(worker, rng.integers(0, pages, 1_000_000)) for _ in range(threads)]
        done = sum(j.result() for j in jobs)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return done / elapsed, direct


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--ram-factor", type=float, default=4.0, help="table size / RAM tier")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--gap-bytes", type=int, default=PAGE, help="chunk file: merge reads")
    parser.add_argument(
        "--advice",
        choices=["random", "normal"],
        default="normal",
        help="chunk file: posix_fadvise of its reads (random: no readahead)",
    )
    parser.add_argument("--raw-seconds", type=float, default=3.0)
    parser.add_argument("--engines", default="chunk,lmdb")
    parser.add_argument("--dir", default=None, help="where the files go (default: a temp dir)")
    args = parser.parse_args()

    budget = int(args.rows / args.ram_factor)
    top = tempfile.mkdtemp(prefix="sok_storage_bench_", dir=args.dir)
    print(
        f"{args.rows:,} records of {RECORD} bytes ({args.rows * RECORD / 2**20:.0f} MiB), RAM "
        f"tier {budget:,} rows ({budget * RECORD / 2**20:.0f} MiB), {IDS_PER_STEP:,} ids/step, "
        f"{args.warmup} warm-up + {args.steps} timed steps, page cache dropped before each, "
        f"{args.threads} I/O threads; files in {top}"
    )
    results = {}
    try:
        for name in args.engines.split(","):
            directory = os.path.join(top, name)
            os.makedirs(directory)
            if name == "lmdb":
                try:
                    engine = Lmdb(directory, args.rows)
                except ImportError:
                    print("lmdb: not installed (pip install lmdb), skipped")
                    continue
            else:
                engine = ChunkFile(directory, args.rows, args.threads, args.gap_bytes, args.advice)
            for path in engine.files():
                print(f"  {engine.name}: {os.path.getsize(path) / 2**20:.0f} MiB on disk")
            try:
                for kind in ("zipf", "uniform"):
                    totals = run_engine(
                        engine, kind, args.rows, budget, args.warmup, args.steps, seed=7
                    )
                    results[(name, kind)] = totals
                    io_s = totals["read_s"] + totals["write_s"]
                    print(
                        f"  {engine.name:<36s} {kind:<8s} {totals['misses'] / args.steps:9,.0f} "
                        f"misses/step  read {totals['read_s'] / args.steps * 1e3:7.1f} ms  "
                        f"write {totals['write_s'] / args.steps * 1e3:7.1f} ms  "
                        f"sync {totals['sync_s'] / args.steps * 1e3:7.1f} ms  "
                        f"{totals['misses'] / io_s:10,.0f} rows/s (read+write), "
                        f"{totals['misses'] / (io_s + totals['sync_s']):10,.0f} with sync"
                    )
                if name == "chunk":
                    path, size = engine.path, args.rows * RECORD
            finally:
                engine.close()
        for kind in ("zipf", "uniform"):
            if ("chunk", kind) in results and ("lmdb", kind) in results:
                rate = {}
                for name in ("chunk", "lmdb"):
                    t = results[(name, kind)]
                    rate[name] = t["misses"] / (t["read_s"] + t["write_s"] + t["sync_s"])
                print(
                    f"{kind}: chunk file / LMDB = {rate['chunk'] / rate['lmdb']:.2f}x "
                    "(rows/s, read + write + sync)"
                )
        if ("chunk", "uniform") in results:
            t = results[("chunk", "uniform")]
            rows_per_page = t["misses"] / t["pages"]
            for threads in sorted({1, args.threads}):
                iops, direct = raw_random_reads(path, size, threads, args.raw_seconds, seed=3)
                limit = iops * rows_per_page
                read_rate = t["misses"] / t["read_s"]
                print(
                    f"disk: {iops:,.0f} random 4 KiB reads/s at queue depth {threads} "
                    f"({'O_DIRECT' if direct else 'pread, cache dropped'}); uniform misses "
                    f"touch {rows_per_page:.2f} rows per page: limit {limit:,.0f} rows/s; "
                    f"chunk file reads {read_rate:,.0f} rows/s = {read_rate / limit:.2f}x of it"
                )
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
