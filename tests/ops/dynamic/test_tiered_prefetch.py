"""sok.prefetch on tiered tables: the next batch's rows on disk come back to RAM ahead of their
lookup. Held to an all-RAM table trained on the same batches (bit for bit: a prefetch only moves
records), and to a tiered table without prefetch (the same budget, fewer misses); a prefetched
row stays in RAM until its lookup; faults of the tier during a prefetch surface in the lookup
that needs the row and lose nothing."""

import time

import keras
import pytest
import tensorflow as tf

import sok_lite as sok
from tests.ops.dynamic.test_tiered_table import (
    DIM,
    assert_disk_full_fails_the_step_and_loses_no_row,
    assert_identical,
    batches,
    init,
    train_step,
)

BUDGET = "400KiB"


def table(tmp_path, label, storage=True, budget=BUDGET, **kw):
    """A table named `label` (or kw's name: one name seeds bfloat16's rounding alike) whose
    tier is under tmp_path/label."""
    disk = sok.storage.Disk(tmp_path / label, ram_budget=budget) if storage else None
    kw.setdefault("name", label)
    return sok.DynamicVariable(DIM, initializer=init(), storage=disk, **kw)


def train(tables, data, prefetched=()):
    """Trains each table on `data` with its own Adam; the tables in `prefetched` get the next
    batch's ids prefetched after each step. Returns the rows each prefetch read back."""
    opts = [keras.optimizers.Adam(0.01) for _ in tables]
    read = []
    for i, ids in enumerate(data):
        for t, opt in zip(tables, opts):
            train_step(t, opt, ids)
        if i + 1 < len(data):
            for t in prefetched:
                read.append(int(sok.prefetch(t, data[i + 1], wait_for_lookup=False)))
    return read


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"evict_policy": "lfu"},
        {"min_count": 2},
        {"dtype": "bfloat16"},
    ],
    ids=["lru", "lfu", "min_count", "bfloat16"],
)
def test_prefetch_trains_as_the_all_ram_table(tmp_path, kw):
    ram = table(tmp_path, "ram", storage=False, name="t", **kw)
    plain = table(tmp_path, "plain", name="t", **kw)
    ahead = table(tmp_path, "ahead", name="t", **kw)
    data = list(batches(3, 30))
    read = train([ram, plain, ahead], data, prefetched=[ahead])
    assert_identical(ram, ahead)
    assert_identical(ram, plain)
    assert sum(read) > 100, read  # rows did come back ahead of their lookup
    p, a = plain.memory_stats(), ahead.memory_stats()
    assert a["misses"] < p["misses"], (p, a)
    assert a["hits"] + a["misses"] == p["hits"] + p["misses"]


def test_prefetched_rows_count_against_the_budget(tmp_path):
    plain, ahead = table(tmp_path, "plain"), table(tmp_path, "ahead")
    opts = [keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01)]
    data = list(batches(4, 24))
    most = {"plain": 0, "ahead": 0}
    for i, ids in enumerate(data):
        for t, opt in zip((plain, ahead), opts):
            train_step(t, opt, ids)
        if i + 1 < len(data):
            sok.prefetch(ahead, data[i + 1], wait_for_lookup=False)
        for name, t in (("plain", plain), ("ahead", ahead)):
            most[name] = max(most[name], t.memory_stats()["rows_ram"])
    # The rows a budget allows bound both; prefetched rows are among them.
    assert most["ahead"] <= most["plain"], most


def lookup(t, keys):
    return sok.lookup_sparse(t, tf.ragged.constant([[k] for k in keys], dtype=tf.int64))


def test_a_prefetched_row_stays_in_ram_until_its_lookup(tmp_path):
    t = table(tmp_path, "pins", budget="96KiB")  # ~100 rows of DIM 64 without slots
    cold = list(range(1000, 1040))
    lookup(t, cold)
    for start in range(2000, 2600, 40):  # cold goes to disk
        lookup(t, range(start, start + 40))
    assert t.memory_stats()["rows_disk"] >= 40
    assert int(sok.prefetch(t, tf.constant(cold, tf.int64), wait_for_lookup=False)) == 40
    # The current batch: new keys, which need room; the cold rows are the coldest in RAM.
    lookup(t, range(3000, 3040))
    before = t.memory_stats()
    lookup(t, cold)  # all of them still in RAM
    after = t.memory_stats()
    assert after["hits"] - before["hits"] == 40, (before, after)
    assert after["misses"] == before["misses"]


def test_prefetch_never_takes_the_room_a_lookup_needs(tmp_path):
    t = table(tmp_path, "room", budget="96KiB")
    for start in range(0, 800, 40):
        lookup(t, range(start, start + 40))
    # More on disk than RAM can hold: the prefetch reads back what fits beside the rows of the
    # last lookup (760-799), the rest stays on disk.
    ram = t.memory_stats()["rows_ram"]
    read = int(sok.prefetch(t, tf.range(0, 400, dtype=tf.int64), wait_for_lookup=False))
    assert 0 < read <= ram - 40, (read, ram)
    lookup(t, range(5000, 5060))  # a batch that needs most of RAM still fits
    stats = t.memory_stats()
    assert stats["rows_ram"] + stats["rows_disk"] == 860


def test_tables_without_a_tier_are_skipped(tmp_path):
    ram = table(tmp_path, "ram", storage=False)
    static = sok.Variable(tf.zeros([10, 4]))
    ids = tf.constant([[1], [2]], tf.int64)
    lookup(ram, [1, 2])
    assert int(sok.prefetch([ram, static], [ids, ids])) == 0


def test_features_sharing_a_table_prefetch_together(tmp_path):
    t = table(tmp_path, "shared", budget="96KiB")
    for start in range(0, 400, 40):
        lookup(t, range(start, start + 40))
    read = sok.prefetch([t, t], [tf.constant([[0], [1]]), tf.ragged.constant([[2, 3], [4]])])
    assert int(read) == 5
    before = t.memory_stats()
    lookup(t, range(5))
    assert t.memory_stats()["hits"] - before["hits"] == 5


@pytest.mark.parametrize(
    "tables, ids, message",
    [
        ("one", [1, 2], "1 tables and 2 id lists"),
        ("tensor", [tf.constant([1])], "sok_lite tables"),
        ("one", [tf.constant([1.5])], "integer ids"),
    ],
)
def test_bad_arguments(tmp_path, tables, ids, message):
    t = table(tmp_path, "bad")
    given = [t] if tables == "one" else [tf.constant([1.0])]
    with pytest.raises(ValueError, match=message):
        sok.prefetch(given, ids)


def test_a_corrupted_record_fails_the_lookup_that_needs_it_not_the_prefetch(tmp_path):
    t = table(tmp_path, "corrupt")
    opt = keras.optimizers.Adam(0.01)
    data = list(batches(6, 6))
    for ids in data:
        train_step(t, opt, ids)
    path = tmp_path / "corrupt" / "corrupt.rank0" / "rows.bin"
    data_bytes = bytearray(path.read_bytes())
    for off in range(64, len(data_bytes), 1001):
        data_bytes[off] ^= 0xFF
    path.write_bytes(bytes(data_bytes))
    stats = t.memory_stats()
    assert int(sok.prefetch(t, data[0], wait_for_lookup=False)) == 0  # nothing moved
    after = t.memory_stats()
    assert (after["rows_ram"], after["rows_disk"]) == (stats["rows_ram"], stats["rows_disk"])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"'corrupt'.*corrupted"):
        train_step(t, opt, data[0])


def test_a_full_disk_fails_the_step_not_the_prefetch_and_loses_no_row(tmp_path):
    assert_disk_full_fails_the_step_and_loses_no_row(tmp_path, prefetch=True)


def test_a_prefetch_after_a_load_does_not_wait_out_its_timeout(tmp_path):
    # A load swaps in rows with their own lookup-step counter (lower than the table's was): the
    # next prefetch still follows the next lookup at once.
    t = table(tmp_path, "loaded")
    opt = keras.optimizers.Adam(0.01)
    data = list(batches(9, 8))
    train_step(t, opt, data[0])
    sok.dump(tmp_path / "ck", [t], opt)
    for ids in data[1:6]:
        train_step(t, opt, ids)
        sok.prefetch(t, ids, wait_for_lookup=False)
    sok.load(tmp_path / "ck", [t], opt)
    train_step(t, opt, data[6])
    start = time.perf_counter()
    sok.prefetch(t, data[7])  # waits for a lookup since the last prefetch: there was one
    assert time.perf_counter() - start < 0.9  # the wait gives up after 1 s
