"""sok.dump replaces only what it wrote: a previous checkpoint or an empty directory."""

import os
import pathlib

import keras
import numpy as np
import pytest

import sok_lite as sok
from sok_lite.io import dump_target
from tests.checkpoint.checkpoint_model import make_tables, state, train


def tree(root: pathlib.Path) -> dict:
    """Every file under root (and root's siblings' names) with its bytes."""
    files = {"siblings": sorted(p.name for p in root.parent.iterdir())}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = pathlib.Path(dirpath) / name
            files[str(p.relative_to(root))] = p.read_bytes() if p.is_file() else None
    return files


@pytest.fixture
def tables():
    t, opt = make_tables(1), keras.optimizers.Adam(0.05)
    train(t, opt, 2)
    return t, opt


def user_source_tree(path):
    (path / "src").mkdir(parents=True)
    (path / "src" / "main.py").write_text("print('mine')\n")


def user_file(path):
    path.write_text("notes\n")


def user_symlink(path):
    target = path.parent / "elsewhere"
    target.mkdir()
    path.symlink_to(target)


def checkpoint_with_a_user_file(path):
    sok.dump(path, make_tables(1))
    (path / "README").write_text("my notes on this run\n")


def user_tmp_directory(path):
    tmp = path.with_name(path.name + ".tmp")
    tmp.mkdir()
    (tmp / "data.csv").write_text("1,2\n")


@pytest.mark.parametrize(
    "make_target",
    [
        user_source_tree,
        user_file,
        user_symlink,
        checkpoint_with_a_user_file,
        user_tmp_directory,
    ],
)
def test_dump_refuses_a_target_it_did_not_write(tmp_path, tables, make_target):
    path = tmp_path / "proj"
    make_target(path)
    before = tree(tmp_path)
    with pytest.raises(ValueError, match="refusing"):
        sok.dump(path, *tables)
    assert tree(tmp_path) == before


def test_dump_fills_an_empty_directory_and_replaces_its_own_checkpoint(tmp_path, tables):
    path = tmp_path / "ckpt"
    path.mkdir()
    sok.dump(path, *tables)
    train(*tables, 1, first_step=2)
    sok.dump(path, *tables)  # over the previous checkpoint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    fresh, fresh_opt = make_tables(1), keras.optimizers.Adam(0.05)
    sok.load(path, fresh, fresh_opt)
    assert int(fresh_opt.iterations.numpy()) == 3


def test_replacing_without_an_atomic_exchange_leaves_nothing_behind(tmp_path, tables, monkeypatch):
    monkeypatch.setattr(dump_target, "_exchange", lambda a, b: False)
    path = tmp_path / "ckpt"
    sok.dump(path, *tables)
    train(*tables, 1, first_step=2)
    sok.dump(path, *tables)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    fresh, fresh_opt = make_tables(1), keras.optimizers.Adam(0.05)
    sok.load(path, fresh, fresh_opt)
    assert int(fresh_opt.iterations.numpy()) == 3


def test_a_failed_dump_leaves_the_previous_checkpoint_and_no_tmp(tmp_path, tables, monkeypatch):
    path = tmp_path / "ckpt"
    sok.dump(path, *tables)
    before = tree(tmp_path)
    dynamic = tables[0][2]

    def failing_chunks(*args):
        yield np.zeros([0], np.int64), np.zeros([0, 5], np.float32)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dynamic, "checkpoint_chunks", failing_chunks)
    with pytest.raises(OSError, match="No space"):
        sok.dump(path, *tables)
    assert tree(tmp_path) == before


def test_an_empty_tmp_left_by_a_dump_killed_before_marking_it_is_reused(tmp_path, tables):
    path = tmp_path / "ckpt"
    path.with_name("ckpt.tmp").mkdir()
    sok.dump(path, *tables)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_killed_dump_leftover_is_cleared_by_the_next_dump(tmp_path, tables):
    path = tmp_path / "ckpt"
    leftover = path.with_name("ckpt.tmp")
    dump_target.make_staging(leftover)
    (leftover / "t0.r0.ids").write_bytes(b"\0" * 8)  # a partial dump: no manifest
    with pytest.raises(sok.CheckpointError, match="no manifest.json"):
        sok.load(leftover, make_tables(1))
    sok.dump(path, *tables)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    fresh, fresh_opt = make_tables(1), keras.optimizers.Adam(0.05)
    sok.load(path, fresh, fresh_opt)
    np.testing.assert_equal(state(fresh, fresh_opt), state(*tables))


def test_a_tiered_tables_directory_goes_with_the_table(tmp_path):
    import gc

    import tensorflow as tf

    table = sok.DynamicVariable(
        8, name="gone", storage=sok.storage.Disk(tmp_path, ram_budget="128KiB")
    )
    for start in range(0, 2000, 200):
        sok.lookup_sparse(table, tf.ragged.constant([list(range(start, start + 200))], tf.int64))
    assert table.memory_stats()["rows_disk"] > 0
    (tmp_path / "mine.txt").write_text("kept")
    del table
    gc.collect()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


def test_a_tiered_tables_directory_goes_at_exit(tmp_path):
    import subprocess
    import sys

    script = (
        "import sys, tensorflow as tf, sok_lite as sok\n"
        "t = sok.DynamicVariable(8, name='kept', storage=sok.storage.Disk(sys.argv[1], 4096))\n"
        "sok.lookup_sparse(t, tf.ragged.constant([[1, 2, 3]], tf.int64))\n"
        "print(sorted(p for p in __import__('os').listdir(sys.argv[1])))\n"
    )
    repo = pathlib.Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo), TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "kept.rank0" in done.stdout
    assert list(tmp_path.iterdir()) == []


class Killed(BaseException):
    """Stands for a kill -9: nothing after it runs, no handler cleans up."""


def die_after_unlinks(monkeypatch, allowed: int) -> None:
    """Path.unlink works `allowed` times, then the process 'dies'."""
    unlink, calls = pathlib.Path.unlink, []

    def dying_unlink(self, *args, **kwargs):
        if len(calls) == allowed:
            raise Killed
        calls.append(self.name)
        unlink(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "unlink", dying_unlink)


@pytest.mark.parametrize("allowed", [0, 1, 2, 3])
@pytest.mark.parametrize("previous_marked", [True, False])
def test_a_dump_killed_while_removing_the_previous_checkpoint_leaves_a_leftover_it_takes(
    tmp_path, tables, monkeypatch, allowed, previous_marked
):
    """After the exchange, <path>.tmp holds the previous checkpoint while its files go: killed
    then, it must stay recognisable as a dump's (marked) whatever the order of the removals,
    also when the previous checkpoint was written before dumps were marked."""
    path = tmp_path / "ckpt"
    sok.dump(path, *tables)
    if not previous_marked:
        (path / dump_target.MARKER).unlink()
    train(*tables, 1)
    with monkeypatch.context() as patch:
        die_after_unlinks(patch, allowed)
        with pytest.raises(Killed):
            sok.dump(path, *tables)
    fresh, fresh_opt = make_tables(1), keras.optimizers.Adam(0.05)
    sok.load(path, fresh, fresh_opt)  # the new checkpoint is whole
    np.testing.assert_equal(state(fresh, fresh_opt), state(*tables))
    sok.dump(path, *tables)  # and the next dump takes the leftover
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
