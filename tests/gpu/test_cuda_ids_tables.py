"""Checks the id and dynamic-table launchers of kernels/cuda against NumPy references.

Covers check_ragged, check_segments, unique_ids, partition_by_owner, init_rows, the row copies
and the hash table (find-or-insert, find, export, growth and eviction by rehash). Needs CuPy and
a CUDA device (skipped otherwise). Outputs are poisoned before each launch and compared element
by element; int64 extremes are ordinary keys.
"""

import subprocess

import gpu_lib
import gpu_reference as ref
import numpy as np
import pytest

cp = gpu_lib.cupy_or_skip()

F32 = np.float32
I64_MIN, I64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
EXTREMES = np.array([I64_MIN, -1, 0, I64_MAX], np.int64)
PASSED = np.iinfo(np.uint64).max
POISON = -7
# Box-Muller's double log / cos on the device may differ from the host's by an ulp.
INIT_TOL = {"rtol": 1e-6, "atol": 1e-7}
INIT = ("random_normal", 1234, 0.0, 0.5)


@pytest.fixture(scope="module")
def lib():
    if not gpu_lib.lib_path().exists():
        subprocess.run(["bash", str(gpu_lib.ROOT / "tests/gpu/build_harness.sh")], check=True)
    return gpu_lib.load()


@pytest.fixture(scope="module")
def kernels(lib):
    return gpu_lib.Kernels(lib)


def poisoned(size, dtype):
    return cp.full(size, POISON, dtype=dtype)


def random_keys(rng, n, kind):
    if kind == "dense":  # many duplicates
        keys = rng.integers(-40, 40, size=n)
    elif kind == "wide":  # the whole int64 range
        keys = rng.integers(I64_MIN, I64_MAX, size=n, endpoint=True)
    else:  # zipf-like hot keys
        keys = rng.zipf(1.3, size=n) * 7919
    keys = np.concatenate([keys.astype(np.int64), EXTREMES, EXTREMES])
    rng.shuffle(keys)
    return keys


# --- check_ragged ------------------------------------------------------------------------------


def test_check_ragged(kernels):
    splits = cp.asarray(np.array([0, 2, 2, 5], np.int64))
    ids = cp.asarray(np.array([0, 1, 9, 3, 4], np.int64))
    inverse = cp.asarray(np.array([0, 1, 2, 3, 4], np.int32))
    assert (kernels.check_ragged(splits, ids, 10, 3, inverse, 5) == PASSED).all()
    bad = kernels.check_ragged(splits, ids, 9, 2, inverse, 4)
    assert list(bad) == [PASSED, 2, 2, 4]  # sample 2 has 3 ids; id 9; inverse 4
    unordered = cp.asarray(np.array([0, 3, 2, 5], np.int64))
    assert kernels.check_ragged(unordered, ids)[0] == 2
    short = cp.asarray(np.array([0, 2, 4], np.int64))
    assert kernels.check_ragged(short, ids)[0] == 2
    assert (kernels.check_ragged(splits, ids, -1) == PASSED).all()  # any key value


def reference_check_segments(values, begin, counts, limit):
    bad = []
    for b, c, lim in zip(begin, counts, limit):
        seg = values[b : b + c].astype(np.int64)
        fails = np.flatnonzero((seg < 0) | ((lim >= 0) & (seg >= lim)))
        bad.append(fails[0] if fails.size else PASSED)
    return np.array(bad, np.uint64)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_check_segments(kernels, dtype):
    rng = np.random.default_rng(3)
    values = rng.integers(0, 50, size=20_000).astype(dtype)
    # Segments out of order, one empty, one spanning most values, one without an upper bound.
    begin = [100, 0, 5_000, 7, 400]
    counts = [300, 90, 15_000, 0, 4_000]
    limit = [50, 50, 50, 3, -1]
    device = cp.asarray(values)
    got = kernels.check_segments(device, begin, counts, limit)
    assert list(got) == [PASSED] * 5
    values[[150, 160, 5_000 + 9_999, 401]] = [50, -1, 77, np.iinfo(dtype).min]
    limit[1] = 49  # a tighter bound: 49 fails at j = 60 and 88, nothing else does
    values[:90] = rng.integers(0, 49, size=90)
    values[[60, 88]] = 49
    device = cp.asarray(values)
    got = kernels.check_segments(device, begin, counts, limit)
    assert list(got) == list(reference_check_segments(values, begin, counts, limit))
    assert list(got) == [50, 60, 9_999, PASSED, 1]


def test_check_segments_empty(kernels):
    values = cp.asarray(np.zeros(1, np.int64))
    assert kernels.check_segments(values, [], [], []).size == 0
    assert list(kernels.check_segments(values, [0], [0], [5])) == [PASSED]


# --- unique_ids --------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 1000, 200_000])
@pytest.mark.parametrize("kind", ["dense", "wide", "zipf"])
def test_unique_ids(kernels, n, kind):
    rng = np.random.default_rng(n + len(kind))
    ids = random_keys(rng, n, kind)
    unique = poisoned(ids.size, cp.int64)
    inverse = poisoned(ids.size, cp.int32)
    counts = poisoned(ids.size, cp.int32)
    u = kernels.unique_ids(cp.asarray(ids), unique, inverse, counts)
    expected_unique, expected_inverse, expected_counts = ref.unique_ids(ids)
    assert u == expected_unique.size
    np.testing.assert_array_equal(unique.get()[:u], expected_unique)
    np.testing.assert_array_equal(inverse.get(), expected_inverse)
    np.testing.assert_array_equal(counts.get()[:u], expected_counts)


def test_unique_ids_empty_and_without_counts(kernels):
    empty = cp.zeros(0, dtype=cp.int64)
    assert kernels.unique_ids(empty, empty, cp.zeros(0, cp.int32)) == 0
    ids = np.array([5, I64_MIN, 5, I64_MAX, I64_MIN], np.int64)
    unique, inverse = poisoned(5, cp.int64), poisoned(5, cp.int32)
    assert kernels.unique_ids(cp.asarray(ids), unique, inverse) == 3
    np.testing.assert_array_equal(unique.get()[:3], [5, I64_MIN, I64_MAX])
    np.testing.assert_array_equal(inverse.get(), [0, 1, 0, 2, 1])


# --- partition_by_owner ------------------------------------------------------------------------


@pytest.mark.parametrize("num_ranks", [1, 2, 3, 8])
@pytest.mark.parametrize("owners", [(-1,), (-2,), (-1, -2, 0), (-2, -1, -1, 1)])
def test_partition_by_owner(kernels, num_ranks, owners):
    owners = [o if o < num_ranks else num_ranks - 1 for o in owners]
    rng = np.random.default_rng(num_ranks * 10 + len(owners))
    uniques = []
    for t, owner in enumerate(owners):
        if owner == -2:
            keys = ref.unique_ids(random_keys(rng, 500, "wide"))[0]
        else:
            keys = ref.unique_ids(rng.integers(0, 10_000, size=300 + 100 * t))[0]
        uniques.append(keys.astype(np.int64))
    uniques.append(np.zeros(0, np.int64))  # an empty table
    owners.append(-1)
    expected = ref.partition_by_owner(uniques, owners, num_ranks)
    total = sum(u.size for u in uniques)
    counts = poisoned(num_ranks * len(uniques), cp.int64)
    message = poisoned(num_ranks * len(uniques) + total, cp.int64)
    splits = poisoned(num_ranks, cp.int64)
    send_pos = poisoned(total, cp.int32)
    kernels.partition_by_owner(
        [cp.asarray(u) for u in uniques], owners, num_ranks, counts, message, splits, send_pos
    )
    for got, want in zip((counts, message, splits, send_pos), expected):
        np.testing.assert_array_equal(got.get(), want)


def test_hash_owner_matches_reference(kernels):
    """Owner of hashed keys, read back from a one-table partition."""
    keys = ref.unique_ids(random_keys(np.random.default_rng(3), 3000, "wide"))[0]
    counts, message = poisoned(5, cp.int64), poisoned(5 + keys.size, cp.int64)
    splits, send_pos = poisoned(5, cp.int64), poisoned(keys.size, cp.int32)
    kernels.partition_by_owner([cp.asarray(keys)], [-2], 5, counts, message, splits, send_pos)
    owner = np.repeat(np.arange(5), counts.get())
    np.testing.assert_array_equal(owner, np.sort(ref.hash_owner(keys, 5), kind="stable"))
    np.testing.assert_array_equal(ref.hash_owner(keys[send_pos.get()], 5), owner)


# --- init_rows and row copies ------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(gpu_lib.INIT_KINDS))
@pytest.mark.parametrize("dim", [1, 5, 128])
def test_init_rows(kernels, kind, dim):
    ids = random_keys(np.random.default_rng(dim), 300, "wide")
    out = cp.full((ids.size, dim), np.nan, dtype=cp.float32)
    kernels.init_rows(kind, 99, -0.5, 0.25, cp.asarray(ids), out)
    np.testing.assert_allclose(out.get(), ref.init_rows(kind, 99, -0.5, 0.25, ids, dim), **INIT_TOL)


@pytest.mark.parametrize("dim", [1, 3, 4, 128])
@pytest.mark.parametrize("which", ["scatter_rows", "gather_rows_i32", "scatter_add_rows"])
def test_row_copies(kernels, dim, which):
    rng = np.random.default_rng(dim)
    rows = 400
    if which == "scatter_add_rows":
        positions = rng.integers(0, rows, size=1000).astype(np.int32)  # repeats add up
    else:
        positions = rng.permutation(rows)[:300].astype(np.int32)
    src_rows = rows if which == "gather_rows_i32" else positions.size
    src = rng.standard_normal((src_rows, dim)).astype(F32)
    if which == "gather_rows_i32":
        dst = cp.full((positions.size, dim), np.nan, dtype=cp.float32)
        expected = src[positions]
    else:
        base = rng.standard_normal((rows, dim)).astype(F32)
        dst = cp.asarray(base)
        expected = base.astype(np.float64)
        if which == "scatter_rows":
            expected[positions] = src
        else:
            np.add.at(expected, positions, src)
    kernels.copy_rows(which, cp.asarray(src), cp.asarray(positions), dst)
    np.testing.assert_allclose(dst.get(), expected, rtol=1e-5, atol=1e-5)


# --- hash table --------------------------------------------------------------------------------


def insert(table, keys, step, init=INIT):
    slots = poisoned(keys.size, cp.int64)
    values = cp.full((keys.size, table.struct.dim), np.nan, dtype=cp.float32)
    failed = table.find_or_insert(cp.asarray(keys), step, slots, values, init)
    return failed, slots.get(), values.get()


@pytest.mark.parametrize("dim", [3, 16])
@pytest.mark.parametrize("kind", ["dense", "wide"])
def test_table_find_or_insert(lib, dim, kind):
    rng = np.random.default_rng(dim)
    keys = random_keys(rng, 20_000, kind)
    table = gpu_lib.DeviceTable(lib, 1 << 16, dim, slot_init=(0.1, 0.0))
    failed, slots, values = insert(table, keys, step=4)
    distinct = np.unique(keys)
    assert failed == 0 and table.size() == distinct.size
    # One slot per distinct key: duplicates in the batch were inserted once.
    assert np.unique(slots).size == distinct.size and (slots >= 0).all()
    for key in EXTREMES:
        assert np.unique(slots[keys == key]).size == 1
    np.testing.assert_allclose(values, ref.init_rows(*INIT, keys, dim), **INIT_TOL)
    np.testing.assert_array_equal(table.values.get()[slots], values)
    np.testing.assert_array_equal(table.slots[0].get()[slots], np.full_like(values, F32(0.1)))
    np.testing.assert_array_equal(table.slots[1].get()[slots], np.zeros_like(values))
    np.testing.assert_array_equal(table.keys.get()[slots], keys)
    assert (table.last_seen.get()[slots] == 4).all()
    state = table.state.get()
    assert (state[slots] == 2).all() and (state != 0).sum() == distinct.size

    # Present keys keep their slot and row (changed rows must come back, not re-initialized);
    # new keys are added.
    table.values[cp.asarray(slots)] += 1.0
    more = np.concatenate([keys[:500], random_keys(rng, 500, "wide")])
    failed, slots2, values2 = insert(table, more, step=5)
    assert failed == 0 and table.size() == np.unique(np.concatenate([keys, more])).size
    np.testing.assert_array_equal(slots2[:500], slots[:500])
    np.testing.assert_array_equal(values2[:500], values[:500] + F32(1.0))
    new = ~np.isin(more, keys)
    np.testing.assert_allclose(values2[new], ref.init_rows(*INIT, more[new], dim), **INIT_TOL)


def test_table_find(lib):
    rng = np.random.default_rng(5)
    keys = np.unique(random_keys(rng, 5000, "wide"))
    table = gpu_lib.DeviceTable(lib, 1 << 14, 8)
    _, slots, values = insert(table, keys, step=1)
    absent = np.setdiff1d(random_keys(rng, 2000, "wide"), keys)
    query = np.concatenate([keys, absent])
    rng.shuffle(query)
    found = poisoned(query.size, cp.int64)
    rows = cp.full((query.size, 8), np.nan, dtype=cp.float32)
    table.find(cp.asarray(query), found, rows)
    slot_of = dict(zip(keys.tolist(), slots.tolist()))
    expected_slots = np.array([slot_of.get(k, -1) for k in query.tolist()], np.int64)
    np.testing.assert_array_equal(found.get(), expected_slots)
    expected_rows = np.zeros((query.size, 8), F32)
    present = expected_slots >= 0
    expected_rows[present] = table.values.get()[expected_slots[present]]
    np.testing.assert_array_equal(rows.get(), expected_rows)
    assert table.size() == keys.size  # find inserts nothing


def test_table_export(lib):
    keys = random_keys(np.random.default_rng(6), 3000, "wide")
    table = gpu_lib.DeviceTable(lib, 1 << 13, 4, slot_init=(0.5,))
    insert(table, keys, step=1)
    distinct = np.unique(keys)
    count, out_keys, out_values, out_slots = table.export(distinct.size + 10)
    assert count == distinct.size
    got = out_keys.get()[:count]
    np.testing.assert_array_equal(np.sort(got), distinct)
    np.testing.assert_allclose(out_values.get()[:count], ref.init_rows(*INIT, got, 4), **INIT_TOL)
    np.testing.assert_array_equal(out_slots[0].get()[:count], np.full((count, 4), F32(0.5)))
    assert (out_keys.get()[count:] == POISON).all()
    count_short, short_keys, _, _ = table.export(10)  # too small: count says so
    assert count_short == distinct.size and np.isin(short_keys.get(), distinct).all()


def test_table_full_then_grow(lib):
    keys = np.unique(random_keys(np.random.default_rng(7), 100, "wide"))[:100]
    small = gpu_lib.DeviceTable(lib, 64, 4, max_size=40)
    failed, slots, values = insert(small, keys, step=1)
    assert failed == keys.size - 40 and small.size() == 40
    assert (slots == -1).sum() == failed
    np.testing.assert_allclose(values, ref.init_rows(*INIT, keys, 4), **INIT_TOL)  # even failed
    kept = slots >= 0
    small.values[cp.asarray(slots[kept])] *= 2.0  # trained rows must survive the growth

    big = gpu_lib.DeviceTable(lib, 256, 4)
    assert small.rehash_into(big, np.iinfo(np.int64).min) == 0 and big.size() == 40
    failed, slots2, values2 = insert(big, keys, step=2)
    assert failed == 0 and big.size() == keys.size and (slots2 >= 0).all()
    np.testing.assert_array_equal(values2[kept], values[kept] * F32(2.0))
    np.testing.assert_allclose(values2[~kept], values[~kept], **INIT_TOL)


def test_table_evict_by_rehash(lib):
    rng = np.random.default_rng(8)
    a, b, c = (np.unique(random_keys(rng, 300, "wide")) for _ in range(3))
    b, c = np.setdiff1d(b, a), np.setdiff1d(np.setdiff1d(c, a), b)
    table = gpu_lib.DeviceTable(lib, 4096, 2)
    insert(table, a, step=1)
    insert(table, b, step=2)
    insert(table, np.concatenate([a, c]), step=3)
    # Evict keys unseen for 1 step at step 3 (core: step - last_seen >= 1): keep last_seen >= 3.
    survivors = gpu_lib.DeviceTable(lib, 4096, 2)
    assert table.rehash_into(survivors, 3) == 0
    assert survivors.size() == np.union1d(a, c).size
    count, keys, _, _ = survivors.export(4096)
    np.testing.assert_array_equal(np.sort(keys.get()[:count]), np.union1d(a, c))


def test_table_rejects_bad_layouts(lib):
    table = gpu_lib.DeviceTable(lib, 64, 4)
    table.struct.capacity = 48  # not a power of two
    assert lib.sok_lite_cuda_table_clear(gpu_lib.ctypes.byref(table.struct), None) != 0
    table.struct.capacity, table.struct.max_size = 64, 64  # probing could never end
    assert lib.sok_lite_cuda_table_clear(gpu_lib.ctypes.byref(table.struct), None) != 0


def test_table_tracks_updates_for_incremental_export(lib):
    rng = np.random.default_rng(9)
    keys = np.unique(random_keys(rng, 400, "wide"))
    table = gpu_lib.DeviceTable(lib, 1 << 12, 4, slot_init=(0.5, 0.0), track_updates=True)
    _, slots, _ = insert(table, keys, step=1)
    assert (table.updated.get()[slots] == -1).all()  # inserted, never changed
    assert table.count_since(I64_MIN) == keys.size and table.count_since(-1) == 0

    # Changes at steps 5 and 7; a negative slot is skipped.
    table.mark_updated(cp.asarray(np.append(slots[:100], -1)), 5)
    table.mark_updated(cp.asarray(slots[50:150]), 7)
    updated = table.updated.get()
    assert (updated[slots[:50]] == 5).all() and (updated[slots[50:150]] == 7).all()
    assert (updated[slots[150:]] == -1).all()
    for since in (I64_MIN, -1, 4, 5, 7):
        arrays = [table.state.get(), table.keys.get(), updated, table.values.get()]
        slot_arrays = [s.get() for s in table.slots]
        for with_slots in (False, True):
            expected = ref.table_rows_since(*arrays, slot_arrays, since, with_slots)
            assert table.count_since(since) == len(expected)
            count, out_keys, out_rows = table.export_rows(since, with_slots, len(expected) + 3)
            assert count == len(expected)
            got_keys = out_keys.get()
            assert sorted(got_keys[:count].tolist()) == sorted(expected)
            assert (got_keys[count:] == POISON).all()
            for key, row in zip(got_keys[:count].tolist(), out_rows.get()[:count]):
                np.testing.assert_array_equal(row, expected[key])

    # Growth keeps the marks; a table that does not track them refuses a step filter.
    big = gpu_lib.DeviceTable(lib, 1 << 13, 4, slot_init=(0.5, 0.0), track_updates=True)
    assert table.rehash_into(big, I64_MIN) == 0
    assert big.count_since(6) == 100 and big.count_since(-1) == 150
    plain = gpu_lib.DeviceTable(lib, 64, 4)
    assert plain.count_since(I64_MIN) == 0
    count = cp.zeros(1, cp.int64)
    struct = gpu_lib.ctypes.byref(plain.struct)
    assert lib.sok_lite_cuda_table_count_since(struct, 3, count.data.ptr, None) != 0


@pytest.mark.parametrize("with_slots", [False, True])
def test_table_store_rows_and_fill_slot(lib, with_slots):
    rng = np.random.default_rng(10)
    keys = np.unique(random_keys(rng, 300, "wide"))
    dim = 3
    table = gpu_lib.DeviceTable(lib, 1 << 11, dim, slot_init=(0.5, 0.0))
    _, slots, _ = insert(table, keys, step=1)
    before = [table.values.get()] + [s.get() for s in table.slots]
    width = dim * (3 if with_slots else 1)
    rows = rng.standard_normal((101, width)).astype(F32)
    chosen = np.append(slots[:100], -1)  # the negative slot's row is not stored
    table.store_rows(cp.asarray(chosen), cp.asarray(rows), with_slots)
    after = [table.values.get()] + [s.get() for s in table.slots]
    for part in range(3):
        expected = before[part].copy()
        if part == 0 or with_slots:
            expected[slots[:100]] = rows[:100, part * dim : (part + 1) * dim]
        np.testing.assert_array_equal(
            after[part][table.state.get() == 2], expected[table.state.get() == 2]
        )

    # A slot laid out after keys exist starts from its initial value in every row.
    table.fill_slot(1, 0.25)
    np.testing.assert_array_equal(table.slots[1].get(), np.full((1 << 11, dim), F32(0.25)))
    np.testing.assert_array_equal(table.slots[0].get(), after[1])
    assert lib.sok_lite_cuda_table_fill_slot(gpu_lib.ctypes.byref(table.struct), 2, 0.0, None) != 0
