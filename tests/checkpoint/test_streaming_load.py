"""sok.load streams a hash table: it reads the dump's files and assigns their rows a bounded
piece at a time, so a tiered table larger than its RAM budget reloads without being held whole;
and it still checks every file of a chain before it assigns anything."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.io import checkpoint
from sok_lite.ops import hash_table_ops

DIM = 8
KEYS = 3000
PIECE = 256  # rows per read while loading: the dump's 3,000 rows take 12 pieces
# Rows with Adam's two slots take ~180 bytes of RAM each, ~540 KB for the table, and each row
# on disk ~82 bytes of index: this budget holds about half of the rows.
BUDGET = "400KiB"


def make_table(storage=None):
    init = keras.initializers.RandomNormal(stddev=0.1, seed=7)
    return sok.DynamicVariable(DIM, initializer=init, name="big", storage=storage)


def train(table, optimizer, steps):
    rng = np.random.default_rng(3)
    for _ in range(steps):
        keys = rng.permutation(KEYS).reshape(-1, 3) * 7919 - 2**40
        ids = tf.ragged.constant(keys.tolist(), dtype=tf.int64)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(sok.lookup_sparse(table, ids, combiners="sum")))
        grads = tape.gradient(loss, [table])
        with sok.OptimizerScope([table]):
            optimizer.apply_gradients(zip(grads, [table]))


def sorted_export(table):
    keys, rows = (x.numpy() for x in table.export(with_slots=True))
    order = np.argsort(keys)
    return keys[order], rows[order]


@pytest.fixture
def spies(monkeypatch):
    """Sizes of every read of a dump file (values) and of every assign (rows) from then on."""
    reads, assigns = [], []
    read, assign = checkpoint._read, hash_table_ops.assign

    def spy_read(f, dtype, count):
        reads.append(count)
        return read(f, dtype, count)

    def spy_assign(handle, keys, *args, **kwargs):
        assigns.append(int(tf.size(keys)))
        return assign(handle, keys, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "_read", spy_read)
    monkeypatch.setattr(hash_table_ops, "assign", spy_assign)
    return reads, assigns


@pytest.fixture
def dumped(tmp_path):
    table, optimizer = make_table(), keras.optimizers.Adam(0.01)
    train(table, optimizer, 2)
    sok.dump(tmp_path / "ck", [table], optimizer)
    return table, optimizer, tmp_path / "ck"


def test_a_tiered_table_larger_than_its_budget_reloads_a_piece_at_a_time(
    dumped, tmp_path, monkeypatch, spies
):
    table, _, path = dumped
    monkeypatch.setattr(checkpoint, "CHUNK_ROWS", PIECE)
    reads, assigns = spies
    restored = make_table(sok.storage.Disk(tmp_path / "tier", ram_budget=BUDGET))
    sok.load(path, [restored], keras.optimizers.Adam(0.01))

    width = 3 * DIM  # the value, m and v
    assert reads and max(reads) <= PIECE * width
    assert max(assigns) <= PIECE and sum(assigns) == KEYS
    assert len([n for n in assigns if n]) == -(-KEYS // PIECE)
    stats = restored.memory_stats()
    assert stats["rows_disk"] > 0 and stats["rows_ram"] + stats["rows_disk"] == KEYS, stats
    for got, want in zip(sorted_export(restored), sorted_export(table)):
        np.testing.assert_array_equal(got, want)


def test_a_chain_streams_and_later_rows_win(dumped, tmp_path, monkeypatch, spies):
    table, optimizer, base = dumped
    train(table, optimizer, 1)
    sok.dump(tmp_path / "inc", [table], optimizer, since_step=2)
    monkeypatch.setattr(checkpoint, "CHUNK_ROWS", PIECE)
    reads, assigns = spies
    restored = make_table(sok.storage.Disk(tmp_path / "tier", ram_budget=BUDGET))
    sok.load([base, tmp_path / "inc"], [restored], keras.optimizers.Adam(0.01))
    assert max(assigns) <= PIECE and sum(assigns) == 2 * KEYS  # the increment changed every row
    for got, want in zip(sorted_export(restored), sorted_export(table)):
        np.testing.assert_array_equal(got, want)


def corrupt_checksum(path):
    f = path / "t0.r0.rows"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0x40
    f.write_bytes(bytes(data))
    return "checksum mismatch"


def corrupt_row_count(path):
    # Sizes and checksums match the files, but the manifest's row count does not: a streaming
    # read would stop short or run past the file.
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["t0.r0.rows"]["rows"] += 1
    (path / "manifest.json").write_text(json.dumps(manifest))
    return "do not hold the 3001 rows"


@pytest.mark.parametrize("corrupt", [corrupt_checksum, corrupt_row_count])
def test_a_bad_increment_fails_before_anything_is_assigned(dumped, tmp_path, spies, corrupt):
    table, optimizer, base = dumped
    train(table, optimizer, 1)
    sok.dump(tmp_path / "inc", [table], optimizer, since_step=2)
    match = corrupt(tmp_path / "inc")
    target = make_table()
    sok.lookup_sparse(target, tf.ragged.constant([[1, 2]], dtype=tf.int64))
    before = sorted_export(target)
    reads, assigns = spies
    with pytest.raises(sok.CheckpointError, match=match):
        sok.load([base, tmp_path / "inc"], [target], keras.optimizers.Adam(0.01))
    assert reads == [] and assigns == []
    for got, want in zip(sorted_export(target), before):
        np.testing.assert_array_equal(got, want)
