"""The disk tier's index (kernels/core/disk_index.h) on its own, through core_capi.cc and ctypes (no
TensorFlow), against a Python oracle: exact (a key's own slot) while small, compact past 2^15 keys,
where a key's candidates are the slots of every stored key sharing its identity (the top 36 bits of
its hash). Keys that share an identity are built by inverting the hash, so the shared-identity
paths run on purpose, not by chance.
"""

import ctypes

import numpy as np
import pytest

from tests.core.capi_build import bind
from tests.core.key_identity import identity, key_for, twins

P = np.ctypeslib.ndpointer
I64 = P(np.int64, flags="C")
i64, c_int, vp = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
SIGNATURES = {
    "sok_disk_index_new": (vp, []),
    "sok_disk_index_free": (None, [vp]),
    "sok_disk_index_insert": (None, [vp, I64, I64, i64]),
    "sok_disk_index_candidates": (None, [vp, I64, i64, i64, I64, I64, I64]),
    "sok_disk_index_apply": (None, [vp, c_int, I64, I64, I64, i64, I64]),
    "sok_disk_index_stats": (None, [vp, i64, I64]),
    "sok_disk_index_clear": (None, [vp]),
}
COMPACT_FROM = 2**15
ERASE, RELOCATE, HOLDS = 0, 1, 2
WIDTH = 32  # candidate slots read back per key


@pytest.fixture(scope="module")
def core(core_capi_library):
    return bind(core_capi_library, SIGNATURES)


class Index:
    def __init__(self, core):
        self.core = core
        self.h = core.sok_disk_index_new()
        self.want = {}  # key -> slot
        self.peak = 0  # the most keys held (the index never shrinks by itself)

    def __del__(self):
        self.core.sok_disk_index_free(self.h)

    def insert(self, keys, slots):
        keys, slots = np.ascontiguousarray(keys, np.int64), np.ascontiguousarray(slots, np.int64)
        self.core.sok_disk_index_insert(self.h, keys, slots, keys.size)
        self.want.update(zip(keys.tolist(), slots.tolist()))
        self.peak = max(self.peak, len(self.want))

    def apply(self, op, keys, slots, to=None):
        keys, slots = np.ascontiguousarray(keys, np.int64), np.ascontiguousarray(slots, np.int64)
        to = slots if to is None else np.ascontiguousarray(to, np.int64)
        out = np.empty(keys.size, np.int64)
        self.core.sok_disk_index_apply(self.h, op, keys, slots, to, keys.size, out)
        return out.astype(bool)

    def erase(self, keys):
        """Erases stored keys at their slots (each must succeed)."""
        slots = np.array([self.want[k] for k in keys.tolist()], np.int64)
        assert self.apply(ERASE, keys, slots).all()
        for k in keys.tolist():
            del self.want[k]

    def move(self, keys, by):
        """Relocates stored keys to their slot + by (each must succeed)."""
        frm = np.array([self.want[k] for k in keys.tolist()], np.int64)
        assert self.apply(RELOCATE, keys, frm, frm + by).all()
        self.want.update(zip(keys.tolist(), (frm + by).tolist()))

    def stats(self, keys=0):
        s = np.empty(5, np.int64)
        self.core.sok_disk_index_stats(self.h, keys, s)
        return dict(zip(["size", "compact", "bytes", "consistent", "bytes_for"], s.tolist()))

    def candidates(self, keys):
        keys = np.ascontiguousarray(keys, np.int64)
        out = np.empty(keys.size * WIDTH, np.int64)
        counts, may = np.empty(keys.size, np.int64), np.empty(keys.size, np.int64)
        self.core.sok_disk_index_candidates(self.h, keys, keys.size, WIDTH, out, counts, may)
        assert (counts <= WIDTH).all()
        got = [sorted(out[i * WIDTH : i * WIDTH + c].tolist()) for i, c in enumerate(counts)]
        return got, may.astype(bool)

    def check(self, probe):
        """The candidates of every key of `probe` (stored or not) are those the oracle gives."""
        s = self.stats(self.peak)
        assert s["consistent"] == 1 and s["size"] == len(self.want), s
        assert s["bytes"] <= s["bytes_for"], s
        probe = np.unique(np.concatenate([np.array(list(self.want), np.int64), probe]))
        got, may = self.candidates(probe)
        if s["compact"]:
            by_id = {}
            for k, slot in zip(identity(list(self.want)).tolist(), self.want.values()):
                by_id.setdefault(k, []).append(slot)
            want = [sorted(by_id.get(i, [])) for i in identity(probe).tolist()]
        else:
            want = [[self.want[k]] if k in self.want else [] for k in probe.tolist()]
        assert got == want
        np.testing.assert_array_equal(may, [bool(w) for w in want])
        return s


def test_matches_the_oracle_through_growth_erase_and_relocate(core):
    rng = np.random.default_rng(7)
    index = Index(core)
    next_slot = 0
    absent = rng.integers(-(2**63), 2**63 - 1, 2000, dtype=np.int64, endpoint=True)
    was_compact = False
    for _ in range(10):
        n = int(rng.integers(9000, 20000))
        fresh = rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64, endpoint=True)
        fresh = np.setdiff1d(np.unique(fresh), np.array(list(index.want), np.int64))
        # Keys sharing an identity with stored or fresh keys: two and three of a kind.
        fresh = np.concatenate([fresh, twins(rng, fresh[:40], 1), twins(rng, fresh[40:50], 2)])
        fresh = rng.permutation(np.unique(fresh))
        index.insert(fresh, next_slot + np.arange(fresh.size))
        next_slot += fresh.size
        # Absent keys: random ones and ones sharing a stored key's identity.
        stored = np.array(list(index.want), np.int64)
        probe = np.concatenate([absent, twins(rng, rng.choice(stored, 50), 1)])
        s = index.check(probe)
        was_compact |= bool(s["compact"])
        assert s["compact"] == (was_compact or len(index.want) > COMPACT_FROM)
        # Erase a share (with a wrong slot first: nothing changes), relocate another.
        gone = rng.choice(stored, stored.size // 3, replace=False)
        slots = np.array([index.want[k] for k in gone.tolist()], np.int64)
        assert not index.apply(ERASE, gone, slots + next_slot + 1).any()
        assert not index.apply(HOLDS, gone, slots + next_slot + 1).any()
        assert index.apply(HOLDS, gone, slots).all()
        assert index.apply(ERASE, gone, slots).all()
        assert not index.apply(ERASE, gone, slots).any()  # gone already
        for k in gone.tolist():
            del index.want[k]
        stored = np.array(list(index.want), np.int64)
        moved = rng.choice(stored, stored.size // 4, replace=False)
        frm = np.array([index.want[k] for k in moved.tolist()], np.int64)
        to = next_slot + np.arange(moved.size)
        next_slot += moved.size
        assert not index.apply(RELOCATE, moved, to, frm).any()  # not at `to`
        assert index.apply(RELOCATE, moved, frm, to).all()
        index.want.update(zip(moved.tolist(), to.tolist()))
        index.check(np.concatenate([probe, gone]))
    # Compact since it passed 2^15 keys, also below that since.
    assert was_compact and len(index.want) < COMPACT_FROM and index.stats()["compact"] == 1
    index.core.sok_disk_index_clear(index.h)
    index.want.clear()
    index.peak = 0
    s = index.check(absent)
    assert s["compact"] == 0 and s["size"] == 0
    index.insert(absent[:100], np.arange(100))
    index.check(absent)


@pytest.mark.parametrize("n", [1000, COMPACT_FROM, 1_500_000])
def test_bytes_for_bounds_the_index(core, n):
    """Exact while small (12-byte entries, doubling), compact past 2^15 keys: under 8 bytes a key
    at scale, charged by BytesFor before it is reached."""
    rng = np.random.default_rng(n)
    index = Index(core)
    keys = np.unique(rng.integers(-(2**63), 2**63 - 1, int(n * 1.01), dtype=np.int64))[:n]
    assert keys.size == n
    before = index.stats(n)["bytes_for"]
    for chunk in np.array_split(rng.permutation(keys), 7):
        index.core.sok_disk_index_insert(index.h, chunk, np.arange(chunk.size), chunk.size)
        assert index.stats()["bytes"] <= before
    s = index.stats(n)
    assert s["consistent"] == 1 and s["size"] == n and s["compact"] == (n > COMPACT_FROM)
    if n > COMPACT_FROM:
        assert s["bytes"] / n <= 7.7 and s["bytes_for"] / n <= 7.8, s
    else:
        assert s["bytes"] / n <= 32, s


def test_chains_that_wrap_around_a_shard(core):
    """Keys of one shard whose tags all home near its last entry: their chain runs past the last
    entry into the first ones, through inserts, growth, erases and moves."""
    rng = np.random.default_rng(11)
    index = Index(core)
    index.insert(np.unique(rng.integers(-(2**62), 2**62, 40_000)), np.arange(40_000))
    assert index.stats()["compact"] == 1
    shard = 5
    for size in (50, 200, 600):
        tags = (1 << 24) - 1 - rng.integers(0, 1 << 17, size)  # the last 1/128 of the tags
        lows = rng.integers(0, 1 << 28, size)
        hashes = [(shard << 52) | (int(t) << 28) | int(lo) for t, lo in zip(tags, lows)]
        keys = np.array([key_for(h) for h in hashes], np.int64)
        keys = np.setdiff1d(np.unique(keys), np.array(list(index.want), np.int64))
        index.insert(keys, 10**6 + size * 1000 + np.arange(keys.size))
        index.check(twins(rng, keys[:20], 1))
        gone = keys[::3]
        index.erase(gone)
        index.move(keys[1::3], 7)
        index.check(gone)


def test_more_keys_of_one_identity_than_two_buckets_hold(core):
    """An identity's entries share two buckets of 9 entries: 30 keys of one identity overflow
    them into the stash, which probes, erases, moves and shard splits still find and keep."""
    rng = np.random.default_rng(5)
    index = Index(core)
    base = np.unique(rng.integers(-(2**62), 2**62, 40_000))
    index.insert(base, np.arange(base.size))
    crowd = np.setdiff1d(twins(rng, base[:2], 29), base)
    index.insert(crowd, 10**6 + np.arange(crowd.size))
    index.check(twins(rng, base[:2], 1))
    gone = crowd[::4]
    index.erase(gone)
    index.move(crowd[1::4], 3 * 10**6)
    index.check(gone)
    # Past 4,096 x 1,024 keys every shard splits: the stashed entries follow their keys.
    more = np.unique(rng.integers(-(2**62), 2**62, 4_300_000))
    more = np.setdiff1d(more, np.array(list(index.want), np.int64))
    index.insert(more, 2 * 10**6 + np.arange(more.size))
    index.check(gone)


def test_churn_at_full_load_keeps_every_key(core):
    """Erase and insert in turn at the shards' highest load (what spills and read-backs do):
    every stored key stays a candidate, every erased one goes."""
    rng = np.random.default_rng(9)
    index = Index(core)
    keys = np.unique(rng.integers(-(2**62), 2**62, 300_000))
    index.insert(keys, np.arange(keys.size))
    next_slot = keys.size
    for _ in range(4):
        stored = np.array(list(index.want), np.int64)
        gone = rng.choice(stored, 60_000, replace=False)
        index.erase(gone)
        fresh = np.setdiff1d(np.unique(rng.integers(-(2**62), 2**62, 60_000)), stored)
        index.insert(fresh, next_slot + np.arange(fresh.size))
        next_slot += fresh.size
        index.check(gone)
