"""The disk tier of the hash table without TF: tests/core/tier_capi.cc (HashTable, with and
without its RowTierFile, kernels/core/hash_table_tier_file.cc) built with the system C++ compiler
and driven through ctypes. A tiered table whose RAM budget holds a quarter of its rows must give
the same bits as a RAM table for the same keys and steps; bad files and failing writes give
errors, never a crash, and lose no row.
"""

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.core.capi_build import ROOT, bind, build
from tests.core.key_identity import twins

# HashTable's sources (every kernels/core/hash_table*.cc) and what they call.
SOURCES = sorted(p.name for p in (ROOT / "kernels" / "core").glob("hash_table*.cc"))
SOURCES += ["disk_index.cc", "open_index.cc", "row_init.cc", "huge_pages.cc", "row_sum.cc"]
I64_MIN = np.iinfo(np.int64).min
DIM = 32
ERR = 512
# Per RAM row: 96 floats with two slots + ~91 bytes of bookkeeping and index, per row on disk
# ~20 bytes of index: 96 KiB holds about a third of the 600 keys below in RAM.
BUDGET = 96 << 10
# Segments of the disk tier's file: ~19 records of two-slot rows, so that tests fill, empty and
# clean many of them (the default, 1 MiB, holds thousands).
SEGMENT = 8 << 10


def load(lib_path) -> ctypes.CDLL:
    P = np.ctypeslib.ndpointer
    I64, F32 = P(np.int64, flags="C"), P(np.float32, flags="C")
    i64, s, vp = ctypes.c_int64, ctypes.c_char_p, ctypes.c_void_p
    sigs = {
        "sok_tier_create": (vp, [i64, i64, s, i64, i64, ctypes.c_int, s, i64]),
        "sok_tier_free": (None, [vp]),
        "sok_tier_lookup": (ctypes.c_int, [vp, I64, i64, F32, s, i64]),
        "sok_tier_lookup_combine": (ctypes.c_int, [vp, I64, I64, i64, F32, s, i64]),
        "sok_tier_apply": (ctypes.c_int, [vp, I64, i64, F32, ctypes.c_float, i64, s, i64]),
        "sok_tier_add_slots": (ctypes.c_int, [vp, F32, i64, s, i64]),
        "sok_tier_assign": (ctypes.c_int, [vp, I64, i64, F32, ctypes.c_int, i64, s, i64]),
        "sok_tier_stride": (i64, [vp]),
        "sok_tier_size": (i64, [vp]),
        "sok_tier_count_since": (i64, [vp, i64, s, i64]),
        "sok_tier_evict": (i64, [vp, i64, s, i64]),
        "sok_tier_clear": (None, [vp]),
        "sok_tier_stats": (None, [vp, I64]),
        "sok_tier_export": (i64, [vp, i64, i64, i64, I64, F32, s, i64]),
        "sok_tier_prefetch": (ctypes.c_int, [vp, I64, i64, ctypes.POINTER(i64), s, i64]),
        "sok_tier_prefetch_begin": (vp, [vp, I64, i64, s, i64]),
        "sok_tier_prefetch_read": (None, [vp]),
        "sok_tier_prefetch_finish": (ctypes.c_int, [vp, vp, ctypes.POINTER(i64), s, i64]),
        "sok_scratch_new": (vp, [i64]),
        "sok_scratch_data": (vp, [vp]),
        "sok_scratch_free": (None, [vp]),
    }
    return bind(lib_path, sigs)


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return load(build(tmp_path_factory.mktemp("tier_capi"), "tier_capi.cc", SOURCES))


class Table:
    """One HashTable; every call that fails raises RuntimeError with the C++ text."""

    def __init__(self, lib, budget=0, directory="", min_count=1, segment_bytes=SEGMENT, lfu=False):
        self.lib = lib
        err = ctypes.create_string_buffer(ERR)
        d = str(directory).encode()
        self.h = lib.sok_tier_create(DIM, budget, d, min_count, segment_bytes, lfu, err, ERR)
        if not self.h:
            raise RuntimeError(err.value.decode())

    def _check(self, rc, err):
        if rc:
            raise RuntimeError(err.value.decode())

    def lookup(self, keys):
        keys = np.ascontiguousarray(keys, np.int64)
        out = np.empty((keys.size, DIM), np.float32)
        err = ctypes.create_string_buffer(ERR)
        self._check(self.lib.sok_tier_lookup(self.h, keys, keys.size, out, err, ERR), err)
        return out

    def lookup_combine(self, keys, splits):
        keys, splits = np.ascontiguousarray(keys, np.int64), np.ascontiguousarray(splits, np.int64)
        out = np.empty((splits.size - 1, DIM), np.float32)
        err = ctypes.create_string_buffer(ERR)
        rc = self.lib.sok_tier_lookup_combine(self.h, keys, splits, splits.size - 1, out, err, ERR)
        self._check(rc, err)
        return out

    def apply(self, keys, grads, step, lr=0.1):
        keys = np.ascontiguousarray(keys, np.int64)
        grads = np.ascontiguousarray(grads, np.float32)
        err = ctypes.create_string_buffer(ERR)
        rc = self.lib.sok_tier_apply(self.h, keys, keys.size, grads, lr, step, err, ERR)
        self._check(rc, err)

    def add_slots(self, init):
        init = np.ascontiguousarray(init, np.float32)
        err = ctypes.create_string_buffer(ERR)
        self._check(self.lib.sok_tier_add_slots(self.h, init, init.size, err, ERR), err)

    def assign(self, keys, rows, with_slots, step):
        keys, rows = np.ascontiguousarray(keys, np.int64), np.ascontiguousarray(rows, np.float32)
        err = ctypes.create_string_buffer(ERR)
        flag = int(with_slots)
        rc = self.lib.sok_tier_assign(self.h, keys, keys.size, rows, flag, step, err, ERR)
        self._check(rc, err)

    def prefetch(self, keys):
        keys = np.ascontiguousarray(keys, np.int64)
        read = ctypes.c_int64()
        err = ctypes.create_string_buffer(ERR)
        rc = self.lib.sok_tier_prefetch(self.h, keys, keys.size, ctypes.byref(read), err, ERR)
        self._check(rc, err)
        return read.value

    def begin_prefetch(self, keys):
        """The first of prefetch's three calls; returns its plan."""
        keys = np.ascontiguousarray(keys, np.int64)
        err = ctypes.create_string_buffer(ERR)
        plan = self.lib.sok_tier_prefetch_begin(self.h, keys, keys.size, err, ERR)
        if not plan:
            raise RuntimeError(err.value.decode())
        return plan

    def read_prefetch(self, plan):
        self.lib.sok_tier_prefetch_read(plan)

    def finish_prefetch(self, plan):
        """The last of the three (frees the plan); returns the rows moved to RAM."""
        read = ctypes.c_int64()
        err = ctypes.create_string_buffer(ERR)
        rc = self.lib.sok_tier_prefetch_finish(self.h, plan, ctypes.byref(read), err, ERR)
        self._check(rc, err)
        return read.value

    def stats(self):
        out = np.zeros(9, np.int64)
        self.lib.sok_tier_stats(self.h, out)
        names = "rows_ram rows_disk bytes_ram bytes_disk ram_budget hits misses spills evictions"
        return dict(zip(names.split(), out.tolist()))

    def count_since(self, since):
        err = ctypes.create_string_buffer(ERR)
        n = self.lib.sok_tier_count_since(self.h, since, err, ERR)
        self._check(n < 0, err)
        return n

    def evict(self, steps_unseen):
        err = ctypes.create_string_buffer(ERR)
        n = self.lib.sok_tier_evict(self.h, steps_unseen, err, ERR)
        self._check(n < 0, err)
        return n

    def export(self, since=I64_MIN, chunk=97):
        stride = self.lib.sok_tier_stride(self.h)
        cap = self.lib.sok_tier_size(self.h)
        keys = np.empty(cap, np.int64)
        rows = np.empty((cap, stride), np.float32)
        err = ctypes.create_string_buffer(ERR)
        n = self.lib.sok_tier_export(self.h, since, chunk, cap, keys, rows, err, ERR)
        if n < 0:
            raise RuntimeError(err.value.decode())
        order = np.argsort(keys[:n])
        return keys[:n][order], rows[:n][order]

    def __getattr__(self, name):  # size, clear
        fn = getattr(self.lib, "sok_tier_" + name)
        return lambda *args: fn(self.h, *args)

    def __del__(self):
        if getattr(self, "h", None):
            self.lib.sok_tier_free(self.h)


def keys_of(rng, step, pool=600):
    # A drifting hot range plus cold keys across the whole pool, large int64s included.
    hot = rng.integers(step * 7, step * 7 + 40, 30) % pool
    cold = rng.integers(0, pool, 20)
    ids = np.concatenate([hot, cold]).astype(np.int64)
    return ids * np.int64(0x5BD1E9955BD1E995 >> 2) - np.int64(2**61)  # wraps: any int64


def train(tables, rng, steps, combine_every=3, slots_at=2):
    for step in range(1, steps + 1):
        if step == slots_at:
            for t in tables:
                t.add_slots([0.5, -1.0])
        keys = keys_of(rng, step)
        splits = np.array([0, 10, 10, 35, keys.size]) if step % combine_every == 0 else None
        lookup_and_apply(tables, keys, rng, step, splits)


def lookup_and_apply(tables, keys, rng, step, splits=None):
    """One step of every table on `keys`: lookups that must agree (combined by `splits` if
    given), then the same update."""
    if splits is None:
        outs = [t.lookup(keys) for t in tables]
    else:
        outs = [t.lookup_combine(keys, splits) for t in tables]
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    unique = np.unique(keys)
    grads = rng.standard_normal((unique.size, DIM)).astype(np.float32)
    for t in tables:
        t.apply(unique, grads, step)
    return unique


def assert_same(a, b):
    ka, ra = a.export()
    kb, rb = b.export()
    np.testing.assert_array_equal(ka, kb)
    np.testing.assert_array_equal(ra, rb)  # bit for bit: the tier moves records, never math


def test_tiered_equals_ram(lib, tmp_path):
    ram, tier = Table(lib), Table(lib, BUDGET, tmp_path / "t")
    train([ram, tier], np.random.default_rng(0), 40)
    assert_same(ram, tier)
    assert ram.size() == tier.size() > 500
    for since in (I64_MIN, 20, 39):
        assert ram.count_since(since) == tier.count_since(since)
        ka, ra = ram.export(since)
        kb, rb = tier.export(since)
        np.testing.assert_array_equal(ka, kb)
        np.testing.assert_array_equal(ra, rb)
    s = tier.stats()
    assert s["rows_disk"] > 3 * s["rows_ram"] // 2 and s["spills"] > 0 and s["misses"] > 0
    assert s["rows_ram"] + s["rows_disk"] == tier.size()
    chunk = 1024 * 3 * DIM * 4  # rows are allocated 1024 at a time: one chunk may overshoot
    assert s["bytes_ram"] <= BUDGET + chunk
    assert s["bytes_disk"] >= s["rows_disk"] * (40 + 8 * DIM * 3 // 2)
    assert s["ram_budget"] == BUDGET and ram.stats()["ram_budget"] == -1
    assert ram.stats()["rows_disk"] == 0 and ram.stats()["spills"] == 0


def test_prefetching_each_next_batch_equals_ram(lib, tmp_path):
    # Each batch repeats its keys (hot ones many times), as real batches do: a prefetch tells
    # their RAM rows apart without sorting them, and probes each key not in RAM once.
    ram = Table(lib)
    tiered, ahead = Table(lib, BUDGET, tmp_path / "t"), Table(lib, BUDGET, tmp_path / "a")
    rng = np.random.default_rng(5)
    batches = [np.repeat(keys_of(rng, step), 1 + step % 4) for step in range(1, 42)]
    read = 0
    for step, keys in enumerate(batches[:-1], 1):
        if step == 2:
            for t in (ram, tiered, ahead):
                t.add_slots([0.5, -1.0])
        lookup_and_apply([ram, tiered, ahead], keys, rng, step)
        read += ahead.prefetch(batches[step])
    assert_same(ram, tiered)
    assert_same(ram, ahead)
    s, a = tiered.stats(), ahead.stats()
    assert read > 0 and a["spills"] > 0 and a["rows_disk"] > a["rows_ram"]
    # Each row read ahead is at least one hit that was a miss; new keys, and rows there was no
    # room for ahead, still miss.
    assert a["misses"] + read <= s["misses"], (a, s, read)


@pytest.mark.parametrize("steps_after", ["plan", "read", "read: two steps"])
def test_a_prefetch_around_steps_equals_ram(lib, tmp_path, steps_after):
    # A prefetch reads the file without the table's lock while the table steps: lookups and
    # updates read rows back (the prefetched batch's among them), spill others, clean segments
    # and reuse emptied ones, after the plan and before the read ("plan"), or after the read
    # and before the rows are placed ("read": one step; "read: two steps": each plan spans two,
    # so that segments emptied by the first are rewritten by the second). Only the records
    # still live where the plan found them, in segments not rewritten since, may be taken.
    # Segments of one or two records: a record read back empties its segment, which the next
    # spill rewrites.
    ram, tier = Table(lib), Table(lib, BUDGET, tmp_path / "t", segment_bytes=512)
    rng = np.random.default_rng(11)
    batches = [np.repeat(keys_of(rng, step), 1 + step % 3) for step in range(1, 43)]
    span = 2 if steps_after == "read: two steps" else 1
    read, plans = [], []
    for step, keys in enumerate(batches[:-2], 1):
        plans.append(tier.begin_prefetch(batches[step + span - 1]))
        if steps_after != "plan":
            tier.read_prefetch(plans[-1])
        if step == 2:  # the file is re-laid out under the plans: nothing of them is taken
            for t in (ram, tier):
                t.add_slots([0.5, -1.0])
        lookup_and_apply([ram, tier], keys, rng, step)
        if steps_after == "plan":
            tier.read_prefetch(plans[-1])
        if len(plans) == span:
            read.append(tier.finish_prefetch(plans.pop(0)))
    assert_same(ram, tier)
    s = tier.stats()
    assert read[1] == 0 and sum(read) > 0 and s["spills"] > 0 and s["rows_disk"] > s["rows_ram"]


def test_a_prefetch_across_a_clear_or_a_corrupted_record(lib, tmp_path):
    tier = Table(lib, BUDGET, tmp_path / "t")
    rng = np.random.default_rng(12)
    train([tier], rng, 20)
    coming = np.arange(600, dtype=np.int64) * np.int64(0x5BD1E9955BD1E995 >> 2) - np.int64(2**61)
    # Cleared between the plan and the placing: nothing is taken, nothing fails.
    plan = tier.begin_prefetch(coming)
    tier.read_prefetch(plan)
    tier.clear()
    assert tier.finish_prefetch(plan) == 0 and tier.size() == 0
    train([tier], rng, 20, slots_at=0)
    before = tier.stats()
    path = tmp_path / "t" / "rows.bin"
    data = bytearray(path.read_bytes())
    for off in range(100, len(data), 997):
        data[off] ^= 0x5A
    plan = tier.begin_prefetch(coming)
    path.write_bytes(bytes(data))
    tier.read_prefetch(plan)
    with pytest.raises(RuntimeError, match="hash table 't': disk tier file .* is corrupted"):
        tier.finish_prefetch(plan)
    after = tier.stats()
    assert after["rows_ram"] == before["rows_ram"] and after["rows_disk"] == before["rows_disk"]


def test_file_stays_within_twice_its_rows(lib, tmp_path):
    # Rows read back leave dead records; segments are reused and cleaned, so the file stays
    # under twice its live records (plus the open segment and the cleaning threshold's two).
    ram, tier = Table(lib), Table(lib, BUDGET, tmp_path / "t")
    rng = np.random.default_rng(6)
    record = 40 + 3 * DIM * 4
    segment = SEGMENT // record * record
    for rounds in range(4):
        train([ram, tier], rng, 30, slots_at=2 if rounds == 0 else 0)
        s = tier.stats()
        assert s["bytes_disk"] <= 2 * s["rows_disk"] * record + 3 * segment, s
    # More records were written than the bound holds: dead ones were reclaimed.
    assert s["spills"] > 2 * s["rows_disk"] + 3 * (segment // record), s
    assert_same(ram, tier)


def test_lfu_spills_keep_frequent_rows(lib, tmp_path):
    # 60 hot keys in every third step, between two bursts of 200 keys from a pool of 1,200 (400
    # rows, more than the ~330 the budget holds): least recently used spills the hot rows in
    # every burst, fewest-steps-seen keeps them.
    tables = {p: Table(lib, BUDGET, tmp_path / p, lfu=p == "lfu") for p in ("lru", "lfu")}
    ram = Table(lib)
    hot = np.arange(60, dtype=np.int64) * 7919
    bursts = iter(np.arange(1, 1201, dtype=np.int64).reshape(6, 200).tolist() * 10)
    hot_misses = dict.fromkeys(tables, 0)  # hot keys read back from disk
    for step in range(1, 61):
        keys = hot if step % 3 == 0 else np.array(next(bursts), np.int64)
        before = {p: t.stats()["misses"] for p, t in tables.items()}
        outs = [t.lookup(keys) for t in (ram, *tables.values())]
        for o in outs[1:]:
            np.testing.assert_array_equal(o, outs[0])
        if step % 3 == 0:
            for p, t in tables.items():
                hot_misses[p] += t.stats()["misses"] - before[p]
    assert hot_misses["lru"] >= 60 * 15 and hot_misses["lfu"] <= 60 * 2, hot_misses
    for t in tables.values():
        assert_same(ram, t)


def test_evict_assign_clear_across_tiers(lib, tmp_path):
    ram, tier = Table(lib), Table(lib, BUDGET, tmp_path / "t")
    rng = np.random.default_rng(1)
    train([ram, tier], rng, 25)
    assert ram.evict(10) == tier.evict(10) > 0
    assert_same(ram, tier)
    assert tier.stats()["evictions"] > 0
    keys = np.concatenate([ram.export()[0][:50], np.arange(-30, 0)])
    full = rng.standard_normal((keys.size, 3 * DIM)).astype(np.float32)
    for t in (ram, tier):
        t.assign(keys, full, True, 100)
        t.assign(keys[::3], full[::3, :DIM] * 2, False, 101)
    assert_same(ram, tier)
    assert ram.count_since(99) == tier.count_since(99) == keys.size
    big = np.arange(5000, 5700, dtype=np.int64)  # more rows than the budget holds: in pieces
    big_rows = rng.standard_normal((big.size, 3 * DIM)).astype(np.float32)
    for t in (ram, tier):
        t.assign(big, big_rows, True, 102)
    assert_same(ram, tier)
    train([ram, tier], rng, 5, slots_at=0)
    assert_same(ram, tier)
    tier.clear()
    assert tier.size() == 0 and tier.stats()["rows_disk"] == 0
    assert tier.export()[0].size == 0


def test_min_count_with_tier(lib, tmp_path):
    ram, tier = Table(lib, min_count=2), Table(lib, BUDGET, tmp_path / "t", min_count=2)
    train([ram, tier], np.random.default_rng(2), 30)
    assert_same(ram, tier)


def test_batch_larger_than_budget(lib, tmp_path):
    tier = Table(lib, 8 << 10, tmp_path / "t")
    with pytest.raises(RuntimeError, match=r"hash table 't': ram_budget 8192 bytes holds \d+ "):
        tier.lookup(np.arange(1000))
    tier.lookup(np.arange(20))  # the table still works


def test_unwritable_directory(lib, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(RuntimeError, match="hash table 't': disk tier: .*not a directory"):
        Table(lib, BUDGET, tmp_path / "file" / "sub")


def test_corrupted_file_is_an_error(lib, tmp_path):
    tier = Table(lib, BUDGET, tmp_path / "t")
    train([tier], np.random.default_rng(3), 20)
    ram_before = tier.stats()["rows_ram"]
    path = tmp_path / "t" / "rows.bin"
    data = bytearray(path.read_bytes())
    for off in range(100, len(data), 997):
        data[off] ^= 0x5A
    path.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match="hash table 't': disk tier file .* is corrupted"):
        tier.export()
    with pytest.raises(RuntimeError, match="corrupted"):
        for step in range(40):  # some key of these batches is on disk
            tier.lookup(keys_of(np.random.default_rng(step), step % 90))
    assert tier.stats()["rows_ram"] >= min(ram_before, 1)
    path.write_bytes(b"")
    with pytest.raises(RuntimeError, match="shorter than its index|corrupted"):
        tier.export()


def test_a_corrupted_record_met_while_cleaning_fails_the_lookup(lib, tmp_path):
    # Every record but those of half the keys is corrupted; looking up only that half reads
    # intact records back, and their dead copies soon make a spill clean segments, whose other
    # live records fail their checksums: the lookup fails, and the table is as it was.
    tier = Table(lib, BUDGET, tmp_path / "t")
    train([tier], np.random.default_rng(3), 30)
    path = tmp_path / "t" / "rows.bin"
    data = bytearray(path.read_bytes())
    record = 40 + 3 * DIM * 4
    keys = np.frombuffer(bytes(data[: len(data) // record * record]), np.int64)
    keys = keys.reshape(-1, record // 8)[:, 0]
    intact = set(np.unique(keys)[::2].tolist())
    for slot, key in enumerate(keys.tolist()):
        if key not in intact:
            data[slot * record + 100] ^= 0x5A
    path.write_bytes(bytes(data))
    rng = np.random.default_rng(9)
    pool = np.array(sorted(intact), np.int64)
    for _ in range(200):
        before = tier.stats()
        try:
            tier.lookup(rng.choice(pool, 40, replace=False))
        except RuntimeError as e:
            assert "hash table 't': disk tier file" in str(e) and "corrupted" in str(e), e
            break
    else:
        pytest.fail("no spill cleaned a segment holding a corrupted record")
    after = tier.stats()
    for name in ("rows_ram", "rows_disk", "hits", "misses", "spills"):
        assert after[name] == before[name], (name, before, after)


DISK_FULL = """
import resource, signal, sys
import numpy as np
sys.path[:0] = [{here!r}, {root!r}]
from test_row_tier_file import Table, load, train, DIM, BUDGET
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
lib = load({lib!r})
ram, tier = Table(lib), Table(lib, BUDGET, {dir!r})
rng = np.random.default_rng(4)
train([ram, tier], rng, 6)
size = tier.stats()["bytes_disk"]
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 1024, resource.RLIM_INFINITY))
try:
    train([ram, tier], rng, 30, slots_at=0)
except RuntimeError as e:
    print("ERROR", e)
ka, ra = tier.export()
kr, rr = ram.export()
# The failed step's lookup stopped before any update (the RAM table's lookup of that step may
# have stored new keys): every row the tiered table holds equals the RAM table's, bit for bit.
pos = np.searchsorted(kr, ka)
print("ROWS", ka.size, np.array_equal(kr[pos], ka) and np.array_equal(rr[pos], ra))
# A batch assign that needs room (within 3/4 of what the budget holds: one piece) fails before
# it changes any value.
new = np.concatenate([ka[:40], np.arange(10**6, 10**6 + 100)]).astype(np.int64)
try:
    tier.assign(new, np.ones((new.size, 3 * DIM), np.float32), True, 500)
except RuntimeError as e:
    print("ASSIGN ERROR", e)
kb, rb = tier.export()
print("ASSIGN KEPT", np.array_equal(ka, kb) and np.array_equal(ra, rb))
"""


def test_disk_full_keeps_rows(lib, tmp_path):
    lib_path = next(Path(lib._name).parent.glob("*.so"))
    code = DISK_FULL.format(
        here=str(Path(__file__).parent), root=str(ROOT), lib=str(lib_path), dir=str(tmp_path / "t")
    )
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "ERROR hash table 't': disk tier: cannot write" in done.stdout, done.stdout
    assert "File too large" in done.stdout
    rows = done.stdout.split("ROWS ")[1].split()
    assert int(rows[0]) > 0 and rows[1] == "True", done.stdout
    assert "ASSIGN ERROR hash table 't': disk tier: cannot write" in done.stdout, done.stdout
    assert "ASSIGN KEPT True" in done.stdout, done.stdout


def test_widened_rows_give_their_chunks_back(lib, tmp_path):
    # 4,000 rows fit 800 KiB before the slots (~220 bytes each), less than half of them after
    # (~475): the chunks the narrow rows took must be freed, not kept past the budget.
    budget = 800 << 10
    ram, tier = Table(lib), Table(lib, budget, tmp_path / "t")
    rng = np.random.default_rng(5)
    keys = rng.permutation(6000).astype(np.int64) * 1000003 - 2**40
    for start in range(0, 4000, 500):
        for t in (ram, tier):
            t.lookup(keys[start : start + 500])
    for t in (ram, tier):
        t.add_slots([0.5, -1.0])
    for step in range(1, 13):
        batch = np.unique(keys[rng.integers(0, 6000, 400)])
        grads = rng.standard_normal((batch.size, DIM)).astype(np.float32)
        outs = [t.lookup(batch) for t in (ram, tier)]
        np.testing.assert_array_equal(outs[0], outs[1])
        for t in (ram, tier):
            t.apply(batch, grads, step)
    assert_same(ram, tier)
    s = tier.stats()
    assert s["rows_disk"] > 0 and s["spills"] > 0
    # The row count follows the budget; allocations pass it by the last chunk's free rows, the
    # doubling growth of the index vectors and the RAM hash index, which keeps the size of the
    # most rows ever in RAM (here 4,000 narrow rows). Keeping the four chunks would take ~2 MB.
    assert s["bytes_ram"] <= budget * 1.6, s


def test_compact_disk_index_equals_ram(lib, tmp_path):
    """Past 2^15 keys on disk the disk index keeps 36 bits of a key's hash, not the key: new
    keys that share a stored key's identity read its record, find another key and are new keys
    all the same. Bit-identical to a RAM table through lookups of stored, shared-identity and new
    keys, Adam-like updates, cleaning (segments of ~19 records), eviction and assign; and the
    budget pays ~8 bytes a key on disk."""
    budget = 2 << 20
    ram, tier = Table(lib), Table(lib, budget, tmp_path / "t")
    rng = np.random.default_rng(8)
    stored = rng.permutation(np.unique(rng.integers(-(2**62), 2**62, 40_000)))
    for t in (ram, tier):
        t.add_slots([0.5, -1.0])
    for batch in np.array_split(stored, 20):
        outs = [t.lookup(batch) for t in (ram, tier)]
        np.testing.assert_array_equal(outs[0], outs[1])
    s = tier.stats()
    assert s["rows_disk"] > 2**15 and s["rows_ram"] + s["rows_disk"] == tier.size() == stored.size
    assert s["bytes_ram"] <= budget + 1024 * 3 * DIM * 4  # rows come 1,024 at a time
    for step in range(21, 41):
        old = rng.choice(stored, 1500, replace=False)  # on disk, most of them
        shared = twins(rng, rng.choice(stored, 200, replace=False), 1)  # new, seemingly on disk
        new = rng.integers(-(2**62), 2**62, 300)
        keys = rng.permutation(np.concatenate([old, shared, new, old[:100]]))
        unique = lookup_and_apply([ram, tier], keys, rng, step)
        stored = np.union1d(stored, unique)
    assert ram.size() == tier.size() == stored.size
    assert_same(ram, tier)
    # The budget charges the index for every key stored (~62k): 12-byte entries at load 3/8-3/4
    # (1.5 MiB) would leave RAM ~1,100 rows of the 2 MiB; under 8 bytes a key leaves ~3,000.
    s = tier.stats()
    assert s["rows_disk"] > 2**15 and s["rows_ram"] >= 2500, s
    assert ram.evict(15) == tier.evict(15) > 0
    back = np.concatenate([stored[:300], twins(rng, stored[300:400], 1)])
    rows = rng.standard_normal((back.size, 3 * DIM)).astype(np.float32)
    for t in (ram, tier):
        t.assign(back, rows, True, 100)
    assert_same(ram, tier)


def _mapped(addr: int, length: int) -> bool:
    """Whether every page of [addr, addr + length) is mapped in this process (mincore)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    vec = ctypes.create_string_buffer(length // 4096 + 1)
    if libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(length), vec) == 0:
        return True
    assert ctypes.get_errno() == 12, ctypes.get_errno()  # ENOMEM: a page is not mapped
    return False


def test_scratch_of_a_mebibyte_or_more_goes_back_to_the_system(lib):
    # A tiered step's scratch (spill candidates, records, rows read back) and a table's growing
    # bookkeeping: a block of 1 MiB or more is a mapping of its own (page-aligned, where malloc
    # puts a header first), unmapped when freed, so that no thread's malloc arena keeps it in RSS
    # beside the table's budget.
    for size in (1 << 20, 6 << 20):
        v = lib.sok_scratch_new(size)
        p = lib.sok_scratch_data(v)
        assert p % 4096 == 0 and _mapped(p, size)
        lib.sok_scratch_free(v)
        assert not _mapped(p, size)


def _mapping_of(addr: int):
    """(start, end, VmFlags) of this process's mapping that holds addr, or None."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        span = line.split(" ", 1)[0]
        if "-" not in span or ":" in span:
            continue
        start, end = (int(x, 16) for x in span.split("-"))
        if start <= addr < end:
            flags = next(f for f in lines[i + 1 :] if f.startswith("VmFlags:"))
            return start, end, flags.split()[1:]
    return None


@pytest.mark.skipif(
    not Path("/sys/kernel/mm/transparent_hugepage/enabled").exists()
    or os.environ.get("SOK_LITE_HUGE_PAGES") == "0",
    reason="no transparent huge pages in this kernel, or turned off",
)
def test_scratch_of_a_huge_page_or_more_is_mapped_for_huge_pages(lib):
    # A step's scratch is mapped anew on every call, and on a virtual machine each 4 KiB page
    # faulted in costs ~1.3 us: a block of 2 MiB or more starts at a 2 MiB boundary, advised for
    # huge pages ("hg"), and nothing is left of the larger mapping it was cut from.
    huge = 2 << 20
    for size in (huge, 3 * huge + 12345):
        v = lib.sok_scratch_new(size)
        p = lib.sok_scratch_data(v)
        start, end, flags = _mapping_of(p)
        assert p % huge == 0 and (start, end) == (p, p + -(-size // 4096) * 4096), (p, start, end)
        assert "hg" in flags, flags
        assert np.all(np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(p)) == 0)
        lib.sok_scratch_free(v)
        assert not _mapped(p, size)
    v = lib.sok_scratch_new(huge - 4096)  # under a huge page: 4 KiB pages, as before
    _, _, flags = _mapping_of(lib.sok_scratch_data(v))
    assert "hg" not in flags, flags
    lib.sok_scratch_free(v)
