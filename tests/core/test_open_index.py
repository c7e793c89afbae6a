"""The open-addressing index (kernels/core/open_index.h) and HashTable's record layout
(kernels/core/hash_table_record.h) on their own, through core_capi.cc and ctypes (no TensorFlow):
the index against a Python dict on random int64 keys through growth, erases, re-inserts, in-place
updates, rehashes and clears; the record layout and its conversions against NumPy.
"""

import ctypes

import numpy as np
import pytest

from tests.core.capi_build import bind, load_key_hash

key_hash = load_key_hash()

P = np.ctypeslib.ndpointer
I64, F32 = P(np.int64, flags="C"), P(np.float32, flags="C")
i64, c_int, vp = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
SIGNATURES = {
    "sok_index_new": (vp, [c_int]),
    "sok_index_free": (None, [vp, c_int]),
    "sok_index_capacity_for": (i64, [i64]),
    "sok_index_entry_bytes": (i64, [c_int]),
    "sok_index_insert": (None, [vp, c_int, I64, I64, i64]),
    "sok_index_get": (None, [vp, c_int, I64, i64, c_int, I64]),
    "sok_index_update": (i64, [vp, c_int, I64, I64, i64]),
    "sok_index_erase": (None, [vp, c_int, I64, i64, I64]),
    "sok_index_stats": (None, [vp, c_int, I64]),
    "sok_index_rehash": (None, [vp, c_int, i64]),
    "sok_index_clear": (None, [vp, c_int]),
    "sok_index_items": (i64, [vp, c_int, I64, I64]),
    "sok_record_layout": (None, [I64, I64]),
    "sok_record_write_row": (None, [I64, F32, c_int, F32]),
    "sok_record_read_row": (None, [I64, F32, c_int, F32]),
    "sok_record_accumulate": (None, [I64, F32, ctypes.c_float, c_int, F32]),
    "sok_record_write_updated_row": (None, [I64, F32, ctypes.c_uint64, i64, i64, F32]),
    "sok_record_round_as_stored": (None, [I64, F32]),
}
I64_MIN, I64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
RAM, DISK = 0, 1  # HashTable's index (int64 row values), the disk tier's (uint32 slot values)
MAX_VALUE = {RAM: I64_MAX, DISK: 2**32 - 2}  # the largest value each stores (-1 / 2^32-1: empty)
BF16, FP16 = 0, 1


@pytest.fixture(scope="module")
def core(core_capi_library):
    return bind(core_capi_library, SIGNATURES)


def capacity_for(keys: int) -> int:
    """The growth rule: a power of two >= 16, at most 3/4 full."""
    capacity = 16
    while keys * 4 > capacity * 3:
        capacity *= 2
    return capacity


class Index:
    """One OpenIndex behind the C ABI, with a dict of what it must hold."""

    def __init__(self, core, kind):
        self.core, self.kind = core, kind
        self.h = core.sok_index_new(kind)
        self.want = {}

    def __del__(self):
        if getattr(self, "h", None):
            self.core.sok_index_free(self.h, self.kind)

    def insert(self, keys, values):
        keys, values = np.ascontiguousarray(keys, np.int64), np.ascontiguousarray(values, np.int64)
        assert not set(keys.tolist()) & self.want.keys()
        self.core.sok_index_insert(self.h, self.kind, keys, values, keys.size)
        self.want.update(zip(keys.tolist(), values.tolist()))

    def get(self, keys, use_view):
        keys = np.ascontiguousarray(keys, np.int64)
        out = np.empty(keys.size, np.int64)
        self.core.sok_index_get(self.h, self.kind, keys, keys.size, use_view, out)
        return out

    def erase(self, keys):
        keys = np.ascontiguousarray(keys, np.int64)
        out = np.empty(keys.size, np.int64)
        self.core.sok_index_erase(self.h, self.kind, keys, keys.size, out)
        return out

    def update(self, keys, values):
        keys, values = np.ascontiguousarray(keys, np.int64), np.ascontiguousarray(values, np.int64)
        return self.core.sok_index_update(self.h, self.kind, keys, values, keys.size)

    def stats(self):
        out = np.zeros(4, np.int64)
        self.core.sok_index_stats(self.h, self.kind, out)
        return dict(zip(["size", "capacity", "bytes", "consistent"], out.tolist()))

    def items(self):
        n = self.stats()["size"]
        keys, values = np.empty(n, np.int64), np.empty(n, np.int64)
        assert self.core.sok_index_items(self.h, self.kind, keys, values) == n
        return dict(zip(keys.tolist(), values.tolist()))

    def check(self, rng, absent=()):
        """Every stored key reads its value (both probe paths), `absent` keys read -1, and the
        entries are consistent and hold exactly the dict."""
        s = self.stats()
        assert s["consistent"] == 1 and s["size"] == len(self.want), s
        assert self.items() == self.want
        keys = np.array(list(self.want), np.int64)
        values = np.array([self.want[k] for k in keys.tolist()], np.int64)
        missing = np.array([k for k in absent if k not in self.want], np.int64)
        probe = np.concatenate([keys, missing])
        order = rng.permutation(probe.size)
        want = np.concatenate([values, np.full(missing.size, -1, np.int64)])[order]
        for use_view in (0, 1):
            np.testing.assert_array_equal(self.get(probe[order], use_view), want)
        return s


def random_keys(rng, n, avoid=()):
    """n distinct int64 keys, extremes and small ones among them, none of `avoid`."""
    pool = np.concatenate(
        [
            np.array([I64_MIN, I64_MIN + 1, -1, 0, 1, I64_MAX - 1, I64_MAX], np.int64),
            rng.integers(-50, 50, n // 8, dtype=np.int64),
            rng.integers(I64_MIN, I64_MAX, n, dtype=np.int64, endpoint=True),
        ]
    )
    _, first = np.unique(pool, return_index=True)
    pool = pool[np.sort(first)]
    pool = pool[~np.isin(pool, np.array(list(avoid), np.int64))]
    return rng.permutation(pool)[:n]


def test_entry_bytes_and_growth_rule(core):
    # The memory planner (sok_lite/memory/layouts.py) and the RAM budget charge these sizes.
    assert core.sok_index_entry_bytes(RAM) == 16
    assert core.sok_index_entry_bytes(DISK) == 12
    for keys in list(range(0, 3000)) + [10**6, 3 * 2**20, 3 * 2**20 + 1, 2**40]:
        assert core.sok_index_capacity_for(keys) == capacity_for(keys), keys


@pytest.mark.parametrize("kind", [RAM, DISK])
def test_index_matches_a_dict(core, kind):
    rng = np.random.default_rng(100 + kind)
    index = Index(core, kind)
    s = index.check(rng, absent=[0, -1, I64_MIN, I64_MAX])
    assert s["size"] == 0 and s["capacity"] == 16
    most = 0
    for _ in range(12):
        # Insert new keys (the index grows by doubling as it passes 3/4 full).
        fresh = random_keys(rng, int(rng.integers(1, 3000)), avoid=index.want)
        index.insert(fresh, rng.integers(0, MAX_VALUE[kind], fresh.size, endpoint=True))
        most = max(most, len(index.want))
        s = index.check(rng, absent=random_keys(rng, 500))
        assert s["capacity"] == capacity_for(most), (s, most)  # grows, never shrinks by itself
        # Erase stored keys (a random share) and absent ones (-1, nothing changes).
        stored = np.array(list(index.want), np.int64)
        gone = rng.choice(stored, int(rng.integers(0, stored.size + 1)), replace=False)
        absent = random_keys(rng, 50, avoid=index.want)
        keys = rng.permutation(np.concatenate([gone, absent]))
        want = np.array([index.want.get(k, -1) for k in keys.tolist()], np.int64)
        np.testing.assert_array_equal(index.erase(keys), want)
        for k in gone.tolist():
            del index.want[k]
        index.check(rng, absent=np.concatenate([gone, absent]))
        # Re-insert some erased keys with other values, and change some stored values in place.
        back = gone[: gone.size // 2]
        index.insert(back, rng.integers(0, MAX_VALUE[kind], back.size, endpoint=True))
        stored = np.array(list(index.want), np.int64)
        changed = rng.choice(stored, min(stored.size, 200), replace=False)
        values = rng.integers(0, MAX_VALUE[kind], changed.size, endpoint=True)
        absent = random_keys(rng, 20, avoid=index.want)
        assert (
            index.update(np.concatenate([changed, absent]), np.concatenate([values, values[:20]]))
            == changed.size
        )
        index.want.update(zip(changed.tolist(), values.tolist()))
        most = max(most, len(index.want))
        index.check(rng, absent=absent)


@pytest.mark.parametrize("kind", [RAM, DISK])
def test_rehash_and_clear(core, kind):
    rng = np.random.default_rng(200 + kind)
    index = Index(core, kind)
    keys = random_keys(rng, 5000)
    index.insert(keys, np.arange(keys.size))
    grown = index.check(rng)
    assert grown["capacity"] == capacity_for(5000) and grown["bytes"] >= grown["capacity"] * 12
    np.testing.assert_array_equal(index.erase(keys[100:]), np.arange(100, keys.size))
    for k in keys[100:].tolist():
        del index.want[k]
    # Shrunk to the entries its keys need (as a spill shrinks HashTable's index), then grown back.
    core.sok_index_rehash(index.h, kind, capacity_for(100))
    s = index.check(rng, absent=keys[100:])
    assert s["capacity"] == capacity_for(100)
    index.insert(keys[100:1000], np.arange(100, 1000))
    assert index.check(rng)["capacity"] == capacity_for(1000)
    core.sok_index_clear(index.h, kind)
    index.want.clear()
    s = index.check(rng, absent=keys)
    # Back to 16 entries; the allocation stays (the disk tier counts it: allocated bytes).
    assert s["size"] == 0 and s["capacity"] == 16 and s["bytes"] >= capacity_for(1000) * 12
    index.insert(keys[:50], np.arange(50))
    index.check(rng, absent=keys[50:])


def homes(keys, capacity):
    """The first probe entry of each key in an index of `capacity` entries."""
    finalized = key_hash.splitmix64(
        np.asarray(keys, np.int64).view(np.uint64) - np.uint64(key_hash._GOLDEN)
    )
    return (finalized & np.uint64(capacity - 1)).astype(np.int64)


@pytest.mark.parametrize("kind", [RAM, DISK])
def test_erase_shifts_chains_back_across_the_wrap(core, kind):
    """12 keys in 16 entries, homed at entries 13, 14, 15 and 0: one probe chain runs past the
    last entry into the first ones. Erasing them in any order keeps every other key reachable
    (the backward shift moves an entry into the hole only where its home allows)."""
    rng = np.random.default_rng(300 + kind)
    candidates = rng.integers(I64_MIN, I64_MAX, 20000, dtype=np.int64)
    home = homes(candidates, 16)
    keys = np.concatenate(
        [candidates[home == h][:n] for h, n in [(13, 2), (14, 4), (15, 3), (0, 3)]]
    )
    assert keys.size == 12 and capacity_for(12) == 16
    for _ in range(60):
        index = Index(core, kind)
        order = rng.permutation(keys.size)
        index.insert(keys[order], order)
        assert index.check(rng)["capacity"] == 16
        for k in rng.permutation(keys).tolist():
            want = index.want.pop(k)
            np.testing.assert_array_equal(index.erase([k]), [want])
            index.check(rng, absent=[k])
            if rng.random() < 0.3:  # sometimes straight back in, to the chain's end
                index.insert([k], [want + 1])


def layout_desc(dim, slots, fmt=None):
    """[dim, num_slots, half, format]; fmt None: a float32 table."""
    return np.array([dim, slots, fmt is not None, fmt or 0], np.int64)


def bf16_nearest(x):
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def nearest(x, fmt):
    return (
        bf16_nearest(x)
        if fmt == BF16
        else np.asarray(x, np.float32).astype(np.float16).view(np.uint16)
    )


def widen(bits, fmt):
    if fmt == BF16:
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return bits.view(np.float16).astype(np.float32)


DIMS = [1, 2, 7, 8, 33]


@pytest.mark.parametrize("fmt", [None, BF16, FP16])
def test_record_layout(core, fmt):
    for dim in DIMS:
        for slots in (0, 1, 3):
            out = np.zeros(3 + slots, np.int64)
            core.sok_record_layout(layout_desc(dim, slots, fmt), out)
            words = dim if fmt is None else (dim + 1) // 2
            want = [words, words + slots * dim, dim * (1 + slots)]
            want += [words + s * dim for s in range(slots)]
            assert out.tolist() == want, (dim, slots, fmt)


def record_for(core, desc, stride, row, with_slots):
    record = np.full(stride, np.nan, np.float32)  # every float the writer leaves stays NaN
    core.sok_record_write_row(desc, np.ascontiguousarray(row, np.float32), with_slots, record)
    return record


@pytest.mark.parametrize("fmt", [None, BF16, FP16])
def test_record_write_and_read_rows(core, fmt):
    rng = np.random.default_rng(400 + (fmt or 0) + (fmt is None))
    for dim in DIMS:
        slots = 2
        desc = layout_desc(dim, slots, fmt)
        words = dim if fmt is None else (dim + 1) // 2
        stride = words + slots * dim
        row = (rng.standard_normal(dim * (1 + slots)) * 10.0 ** rng.integers(-3, 4)).astype(
            np.float32
        )
        record = record_for(core, desc, stride, row, True)
        # Slots: float32, as given, at their offsets.
        np.testing.assert_array_equal(record[words:], row[dim:])
        if fmt is None:
            np.testing.assert_array_equal(record[:dim], row[:dim])
            value = row[:dim]
        else:
            bits = record[:words].view(np.uint16)
            np.testing.assert_array_equal(bits[:dim], nearest(row[:dim], fmt))
            if dim % 2:
                assert bits[dim] == 0  # the padding half of the last word
            value = widen(bits[:dim], fmt)
        out = np.full(dim * (1 + slots), np.nan, np.float32)
        core.sok_record_read_row(desc, record, 1, out)
        np.testing.assert_array_equal(out, np.concatenate([value, row[dim:]]))
        out[:] = np.nan
        core.sok_record_read_row(desc, record, 0, out)
        np.testing.assert_array_equal(out[:dim], value)
        assert np.isnan(out[dim:]).all()  # without slots: only the value is written
        rounded = row[:dim].copy()
        core.sok_record_round_as_stored(desc, rounded)
        np.testing.assert_array_equal(rounded, value)
        # The value alone: the slots' floats are left as they were.
        alone = record_for(core, desc, stride, row[:dim], False)
        np.testing.assert_array_equal(alone[:words].view(np.uint32), record[:words].view(np.uint32))
        assert np.isnan(alone[words:]).all()
        # A combine's steps: acc = w * value, then acc += w * value, in float32.
        acc = np.full(dim, np.nan, np.float32)
        w1, w2 = np.float32(0.75), np.float32(-1.5)
        core.sok_record_accumulate(desc, record, w1, 1, acc)
        np.testing.assert_array_equal(acc, w1 * value)
        core.sok_record_accumulate(desc, record, w2, 0, acc)
        np.testing.assert_array_equal(acc, w1 * value + w2 * value)


@pytest.mark.parametrize("fmt", [None, BF16, FP16])
def test_record_updated_rows_round_by_key_and_step(core, fmt):
    """An optimizer step's row: bfloat16 rounds stochastically with the draws of (seed, step,
    key), as key_hash.rounding_bits mirrors them; float16 to nearest; float32 as is."""
    rng = np.random.default_rng(500 + (fmt or 0) + (fmt is None))
    seed = 2**64 - 12345
    for dim in DIMS:
        slots = 2
        desc = layout_desc(dim, slots, fmt)
        words = dim if fmt is None else (dim + 1) // 2
        for key, step in [(0, 1), (-(2**62) - 3, 7), (I64_MAX, 2**40)]:
            row = rng.standard_normal(dim * (1 + slots)).astype(np.float32)
            record = np.full(words + slots * dim, np.nan, np.float32)
            core.sok_record_write_updated_row(desc, row, seed, key, step, record)
            np.testing.assert_array_equal(record[words:], row[dim:])
            if fmt is None:
                np.testing.assert_array_equal(record[:dim], row[:dim])
                continue
            bits = record[:words].view(np.uint16)[:dim]
            if fmt == FP16:
                np.testing.assert_array_equal(bits, nearest(row[:dim], fmt))
                continue
            draws = key_hash.rounding_bits(seed, step, [key], dim)[0]
            u = row[:dim].view(np.uint32).astype(np.uint64)
            np.testing.assert_array_equal(bits, ((u + draws) >> 16).astype(np.uint16))
