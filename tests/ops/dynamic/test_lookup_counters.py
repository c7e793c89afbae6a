"""memory_stats' hits and misses: per looked-up id (repeats counted), hits the ids whose key was
in RAM when the lookup began, misses the others (created, not admitted yet, or read back from
disk); the same with or without a disk tier, and counted only by lookups that succeed."""

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.ops import hash_table_ops

DIM = 4


def counts(table) -> tuple[int, int]:
    stats = table.memory_stats()
    return stats["hits"], stats["misses"]


def lookup(table, keys):
    return hash_table_ops.lookup(table.handle, np.array(keys, np.int64), DIM)


def lookup_combine(table, keys):
    keys = np.array(keys, np.int64)
    splits = np.array([0, len(keys) // 2, len(keys)], np.int64)
    empty = np.zeros([0], np.float32)
    return hash_table_ops.lookup_combine(table.handle, keys, splits, empty, DIM, "sum", 0)


def test_ram_and_tiered_tables_count_alike_when_nothing_spills(tmp_path):
    ram = sok.DynamicVariable(DIM, initializer=0.5, name="counted_ram")
    disk = sok.storage.Disk(tmp_path / "tier", ram_budget="1MiB")
    tiered = sok.DynamicVariable(DIM, initializer=0.5, name="counted_tiered", storage=disk)
    for table in (ram, tiered):
        lookup(table, [1, 2, 2, 3])  # all new: 4 misses
        assert counts(table) == (0, 4)
        lookup(table, [2, 3, 4, 4])  # 2 and 3 in RAM, 4 new twice
        assert counts(table) == (2, 6)
        lookup_combine(table, [1, 5, 5, 2])  # 1 and 2 in RAM, 5 new twice
        assert counts(table) == (4, 8)
        lookup_combine(table, [1, 2, 3, 4])
        assert counts(table) == (8, 8)
    assert tiered.memory_stats()["rows_disk"] == tiered.memory_stats()["spills"] == 0


def test_a_read_back_row_is_a_miss(tmp_path):
    # A budget of a few rows: looking up new keys spills the oldest, which come back as misses.
    disk = sok.storage.Disk(tmp_path / "tier", ram_budget=4096)
    tiered = sok.DynamicVariable(DIM, initializer=0.5, name="counted_spill", storage=disk)
    ram = sok.DynamicVariable(DIM, initializer=0.5, name="counted_spill_ram")
    keys = np.arange(16) * 7919
    for table in (ram, tiered):
        for part in np.split(keys, 8):
            lookup(table, part)
        lookup(table, keys[:2])  # spilled by now
    assert tiered.memory_stats()["spills"] > 0
    assert counts(tiered) == (0, 18)
    assert counts(ram) == (2, 16)


@pytest.mark.parametrize("run", [lookup, lookup_combine])
def test_a_failed_lookup_counts_nothing(tmp_path, run):
    # Capacity 2 cannot hold the 4 distinct keys of one lookup: the lookup fails after probing.
    small = sok.DynamicVariable(
        DIM, initializer=0.5, name=f"counted_cap_{run.__name__}", capacity=2
    )
    run(small, [1, 1, 2, 2])
    before = counts(small)
    assert before == (0, 4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="capacity 2 is too small"):
        run(small, [1, 2, 3, 4])
    assert counts(small) == before
    # A RAM budget too small for one batch: the lookup fails making room.
    disk = sok.storage.Disk(tmp_path / "tier", ram_budget=4096)
    tiered = sok.DynamicVariable(
        DIM, initializer=0.5, name=f"counted_budget_{run.__name__}", storage=disk
    )
    run(tiered, [1, 2])
    before = counts(tiered)
    with pytest.raises(tf.errors.InvalidArgumentError, match="ram_budget"):
        run(tiered, np.arange(1000))
    assert counts(tiered) == before
