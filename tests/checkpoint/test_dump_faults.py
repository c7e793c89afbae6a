"""Faults during sok.dump and during a disk tier's spill lose nothing: kill -9 at random points
of a dump (the checkpoint at the path stays complete and loadable) and a full disk
(RLIMIT_FSIZE) during a dump or a spill.

SOK_LITE_FAULT_SEEDS sets how many random kill points run (make fuzz runs 20)."""

import contextlib
import os
import pathlib
import random
import resource
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from tests.checkpoint.checkpoint_model import make_tables, state, train

SEEDS = int(os.environ.get("SOK_LITE_FAULT_SEEDS", "3"))

# Dumps to argv[1] again and again, one training step apart, printing each step dumped.
DUMP_LOOP = """
import sys, keras, sok_lite as sok
from tests.checkpoint.checkpoint_model import make_tables, train
tables, opt = make_tables(1), keras.optimizers.Adam(0.05)
train(tables, opt, 3)
sok.dump(sys.argv[1], tables, opt)
print("ready", flush=True)
step = 3
while True:
    train(tables, opt, 1, first_step=step)
    step += 1
    sok.dump(sys.argv[1], tables, opt)
"""


@pytest.mark.parametrize("seed", range(SEEDS))
def test_kill_at_a_random_point_of_dump_keeps_a_complete_checkpoint(tmp_path, seed):
    path = tmp_path / "ckpt"
    repo = pathlib.Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen(
        [sys.executable, "-c", DUMP_LOOP, str(path)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(random.Random(seed).uniform(0.0, 1.5))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    fresh, fresh_opt = make_tables(1), keras.optimizers.Adam(0.05)
    sok.load(path, fresh, fresh_opt)  # complete: every file's size and checksum match
    assert int(fresh_opt.iterations.numpy()) >= 3
    tmp = path.with_name("ckpt.tmp")
    if tmp.exists() and not (tmp / "manifest.json").exists():
        with pytest.raises(sok.CheckpointError, match="no manifest.json"):
            sok.load(tmp, make_tables(1))  # a partial dump is never taken for a checkpoint
    sok.dump(path, fresh, fresh_opt)  # the next dump clears what the killed one left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


@contextlib.contextmanager
def file_size_limit(limit_bytes: int):
    """Writes past limit_bytes fail with EFBIG (SIGXFSZ ignored) inside the block."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


def test_a_full_disk_during_dump_keeps_the_previous_checkpoint(tmp_path):
    tables, opt = make_tables(1), keras.optimizers.Adam(0.05)
    train(tables, opt, 2)
    path = tmp_path / "ckpt"
    sok.dump(path, tables, opt)
    big = sok.DynamicVariable(64, name="big")
    sok.lookup_sparse(big, tf.ragged.constant([list(range(5000))], dtype=tf.int64))
    with file_size_limit(64 * 1024), pytest.raises(OSError):
        sok.dump(path, tables + [big], opt)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    fresh, fresh_opt = make_tables(1), keras.optimizers.Adam(0.05)
    sok.load(path, fresh, fresh_opt)
    np.testing.assert_equal(state(fresh, fresh_opt), state(tables, opt))


def test_a_full_disk_during_a_spill_loses_no_row(tmp_path):
    table = sok.DynamicVariable(
        64,
        name="spilling",
        initializer="random_normal",
        storage=sok.storage.Disk(tmp_path / "tier", ram_budget="256KiB"),
    )
    sok.lookup_sparse(table, tf.ragged.constant([list(range(600))], dtype=tf.int64))
    keys, rows = table.export()
    before = dict(zip(keys.numpy().tolist(), rows.numpy()))
    with file_size_limit(16 * 1024), pytest.raises(tf.errors.InvalidArgumentError, match="disk"):
        for start in range(600, 20_000, 600):  # new keys until a spill needs the disk
            ids = tf.ragged.constant([list(range(start, start + 600))], dtype=tf.int64)
            sok.lookup_sparse(table, ids)
    keys, rows = table.export()
    after = dict(zip(keys.numpy().tolist(), rows.numpy()))
    for key, row in before.items():
        np.testing.assert_array_equal(after[key], row, err_msg=f"key {key}")
    sok.lookup_sparse(table, tf.ragged.constant([list(range(30_000, 30_300))], dtype=tf.int64))
    assert int(table.size()) >= len(before) + 300  # with room again, the tier works on
