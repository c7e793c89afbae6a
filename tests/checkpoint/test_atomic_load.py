"""A load, replace_rows or checkpoint restore that fails part-way changes no table, slot,
counter or optimizer step: hash tables are filled aside and swapped in (sok_lite.tables.staging)."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.ops import hash_table_ops
from tests.checkpoint.checkpoint_model import make_tables, state, train


def keyed_state(table) -> tuple:
    keys, rows = table.export(with_slots=True)
    order = np.argsort(keys.numpy())
    stats = table.memory_stats()
    counters = {k: stats[k] for k in ("hits", "misses", "evictions") if k in stats}
    return keys.numpy()[order], rows.numpy()[order], counters


def look_up(table, keys):
    sok.lookup_sparse(table, tf.ragged.constant([list(keys)], dtype=tf.int64))


@pytest.fixture
def big_dump(tmp_path):
    """A dump of 30,000 keys of dimension 16."""
    big = sok.DynamicVariable(16, name="big")
    look_up(big, range(30_000))
    sok.dump(tmp_path / "big", [big])
    return tmp_path / "big"


def test_a_load_too_big_for_the_ram_budget_leaves_a_tiered_table_as_it_was(tmp_path, big_dump):
    table = sok.DynamicVariable(
        16, name="tiered", storage=sok.storage.Disk(tmp_path / "tier", ram_budget="384KiB")
    )
    look_up(table, range(10**6, 10**6 + 2000))
    before = keyed_state(table)
    with pytest.raises(sok.CheckpointError, match="'tiered'.*30000 keys.*ram_budget"):
        sok.load(big_dump, [table])  # refused from the ids files, before any table changes
    np.testing.assert_equal(keyed_state(table), before)
    assert os.listdir(tmp_path / "tier") == ["tiered.rank0"]  # no staging directory left
    look_up(table, range(10**6, 10**6 + 10))  # still in use


def test_a_load_past_capacity_is_refused_and_changes_nothing(big_dump):
    table = sok.DynamicVariable(16, name="capped", capacity=1000)
    look_up(table, range(500))
    before = keyed_state(table)
    with pytest.raises(ValueError, match="'capped'.*30000.*capacity of 1000"):
        sok.load(big_dump, [table])
    np.testing.assert_equal(keyed_state(table), before)


def test_a_load_into_a_tiered_table_swaps_its_rows_in_and_keeps_the_tier_working(tmp_path):
    source = sok.DynamicVariable(8, name="t", initializer="random_normal")
    look_up(source, range(3000))
    sok.dump(tmp_path / "ckpt", [source])
    table = sok.DynamicVariable(
        8, name="t", storage=sok.storage.Disk(tmp_path / "tier", ram_budget="256KiB")
    )
    look_up(table, range(-200, 0))
    sok.load(tmp_path / "ckpt", [table])
    np.testing.assert_equal(keyed_state(table)[:2], keyed_state(source)[:2])
    assert sorted(os.listdir(tmp_path / "tier" / "t.rank0")) == ["rows.bin"]
    assert table.memory_stats()["rows_disk"] > 0  # the loaded rows spilled into the tier
    for start in range(3000, 6000, 200):  # spills and reads back through the swapped-in file
        look_up(table, range(start, start + 200))
    look_up(table, range(0, 200))
    keys, values = table.export()
    assert len(keys) == 6000


def test_a_failure_in_a_later_table_leaves_the_earlier_ones_and_the_step(tmp_path):
    tables, opt = make_tables(1), keras.optimizers.Adam(0.05)
    train(tables, opt, 4)
    sok.dump(tmp_path / "ckpt", tables, opt)
    target, target_opt = make_tables(1), keras.optimizers.Adam(0.05)
    train(target, target_opt, 2)
    before = state(target, target_opt)
    failing = target[2]

    def fail(*args):
        raise OSError(5, "Input/output error")

    failing.checkpoint_stage = fail
    with pytest.raises(OSError, match="Input/output"):
        sok.load(tmp_path / "ckpt", target, target_opt)
    np.testing.assert_equal(state(target, target_opt), before)


def test_a_failed_swap_undoes_the_tables_already_swapped(tmp_path, monkeypatch):
    tables = [sok.DynamicVariable(4, name=f"d{i}", initializer="random_uniform") for i in range(2)]
    for t in tables:
        look_up(t, range(100))
    sok.dump(tmp_path / "ckpt", tables)
    targets = [sok.DynamicVariable(4, name=f"d{i}") for i in range(2)]
    for t in targets:
        look_up(t, range(1000, 1050))
    before = [keyed_state(t) for t in targets]
    real_swap, calls = hash_table_ops.swap_rows, []

    def swap_failing_second(handle, staged):
        calls.append(handle)
        if len(calls) == 2:
            raise tf.errors.InvalidArgumentError(None, None, "disk tier: cannot move")
        return real_swap(handle, staged)

    monkeypatch.setattr(hash_table_ops, "swap_rows", swap_failing_second)
    with pytest.raises(tf.errors.InvalidArgumentError, match="cannot move"):
        sok.load(tmp_path / "ckpt", targets)
    assert len(calls) == 3  # the first swap, the failed second, the first undone
    for t, b in zip(targets, before):
        np.testing.assert_equal(keyed_state(t), b)


def test_replace_rows_that_does_not_fit_the_budget_keeps_the_rows(tmp_path):
    table = sok.DynamicVariable(
        16, name="r", storage=sok.storage.Disk(tmp_path / "tier", ram_budget="384KiB")
    )
    look_up(table, range(2000))
    before = keyed_state(table)
    keys = np.arange(40_000, dtype=np.int64)
    with pytest.raises(tf.errors.InvalidArgumentError, match="'r'.*ram_budget"):
        table.replace_rows(keys, np.ones([len(keys), 16], np.float32))
    np.testing.assert_equal(keyed_state(table), before)


def test_checkpoint_restore_into_a_too_small_tier_keeps_the_rows(tmp_path):
    source = sok.DynamicVariable(16, name="c")
    look_up(source, range(40_000))
    path = tf.train.Checkpoint(table=source).write(str(tmp_path / "tf_ckpt"))
    table = sok.DynamicVariable(
        16, name="c", storage=sok.storage.Disk(tmp_path / "tier", ram_budget="384KiB")
    )
    look_up(table, range(-100, 0))
    before = keyed_state(table)
    with pytest.raises(tf.errors.InvalidArgumentError, match="ram_budget"):
        tf.train.Checkpoint(table=table).read(path).assert_consumed()
    np.testing.assert_equal(keyed_state(table), before)


def test_a_successful_replace_rows_keeps_the_counters(tmp_path):
    table = sok.DynamicVariable(4, name="k")
    look_up(table, [1, 2, 3])
    look_up(table, [1, 2])
    counters = keyed_state(table)[2]
    table.replace_rows(np.array([7, 8], np.int64), np.ones([2, 4], np.float32))
    keys, _, after = keyed_state(table)
    assert keys.tolist() == [7, 8] and after == counters


def test_a_load_that_outgrows_the_budget_part_way_leaves_the_table(tmp_path, monkeypatch):
    """Past the up-front check (here switched off), the staging table itself refuses."""
    from sok_lite.io import checkpoint

    monkeypatch.setattr(checkpoint, "_check_room", lambda *args: None)
    big = sok.DynamicVariable(16, name="big2")
    look_up(big, range(30_000))
    sok.dump(tmp_path / "big", [big])
    table = sok.DynamicVariable(
        16, name="tiered2", storage=sok.storage.Disk(tmp_path / "tier", ram_budget="384KiB")
    )
    look_up(table, range(10**6, 10**6 + 2000))
    before = keyed_state(table)
    with pytest.raises(tf.errors.InvalidArgumentError, match="'tiered2'.*ram_budget"):
        sok.load(tmp_path / "big", [table])
    np.testing.assert_equal(keyed_state(table), before)
    assert os.listdir(tmp_path / "tier") == ["tiered2.rank0"]


def test_increments_that_outgrow_the_capacity_are_refused(tmp_path):
    source, opt = sok.DynamicVariable(4, name="grow"), keras.optimizers.SGD(0.1)
    look_up(source, range(600))
    sok.dump(tmp_path / "base", [source], opt)
    look_up(source, range(600, 1200))
    grads = tf.IndexedSlices(tf.ones([600, 4]), tf.range(600, 1200, dtype=tf.int64))
    with sok.OptimizerScope([source]):
        opt.apply_gradients([(grads, source)])
    sok.dump(tmp_path / "inc", [source], opt, since_step=0)
    table = sok.DynamicVariable(4, name="grow", capacity=1000)
    look_up(table, range(-10, 0))
    before = keyed_state(table)
    with pytest.raises(ValueError, match="'grow'.*1200.*capacity of 1000"):
        sok.load([tmp_path / "base", tmp_path / "inc"], [table], opt)
    np.testing.assert_equal(keyed_state(table), before)
