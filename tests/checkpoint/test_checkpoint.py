"""sok.dump / sok.load on one rank: round trip, continued training, corruption, crashes."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.tables.key_hash import hash_owner
from tests.checkpoint.checkpoint_model import make_tables, state, train


def assert_same_state(a: dict, b: dict, rtol=0.0):
    assert sorted(a) == sorted(b)
    for key in a:
        if isinstance(a[key], tuple):
            np.testing.assert_array_equal(a[key][0], b[key][0], err_msg=key)
            np.testing.assert_allclose(a[key][1], b[key][1], rtol=rtol, err_msg=key)
        else:
            np.testing.assert_allclose(a[key], b[key], rtol=rtol, err_msg=key)


@pytest.fixture
def trained(tmp_path):
    tables, opt = make_tables(1), keras.optimizers.Adam(0.05)
    train(tables, opt, 6)
    path = tmp_path / "ckpt"
    sok.dump(path, tables, opt)
    return tables, opt, path


def test_round_trip_and_continued_training(trained):
    tables, opt, path = trained
    before = state(tables, opt)
    fresh, fresh_opt = make_tables(1), keras.optimizers.Adam(0.05)
    sok.load(path, fresh, fresh_opt)
    assert_same_state(state(fresh, fresh_opt), before)
    train(tables, opt, 4, first_step=6)
    train(fresh, fresh_opt, 4, first_step=6)
    assert_same_state(state(fresh, fresh_opt), state(tables, opt), rtol=1e-6)


def test_values_only_without_optimizer(trained, tmp_path):
    tables, opt, _ = trained
    sok.dump(tmp_path / "plain", tables)
    fresh = make_tables(1)
    sok.load(tmp_path / "plain", fresh)
    for a, b in zip(tables[:2], fresh[:2]):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    keys, values = fresh[2].export()
    assert len(keys) == int(tables[2].size())


def corrupt_truncate(path):
    f = path / "t0.r0.rows"
    f.write_bytes(f.read_bytes()[:-4])
    return "t0.r0.rows.*truncated"


def corrupt_flip(path):
    f = path / "t2.r0.rows"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x40
    f.write_bytes(bytes(data))
    return "t2.r0.rows: checksum mismatch"


def corrupt_delete(path):
    (path / "t1.r0.ids").unlink()
    return "t1.r0.ids: missing shard file"


def corrupt_dim(path):
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["tables"][0]["dim"] = 5
    (path / "manifest.json").write_text(json.dumps(manifest))
    return "manifest.json: table 'users': dim 5"


def corrupt_manifest(path):
    (path / "manifest.json").unlink()
    return "no manifest.json"


@pytest.mark.parametrize(
    "corrupt", [corrupt_truncate, corrupt_flip, corrupt_delete, corrupt_dim, corrupt_manifest]
)
def test_corruption_fails_cleanly_and_changes_nothing(trained, corrupt):
    tables, opt, path = trained
    match = corrupt(path)
    target, target_opt = make_tables(1), keras.optimizers.Adam(0.05)
    train(target, target_opt, 2)
    before = state(target, target_opt)
    with pytest.raises(sok.CheckpointError, match=match):
        sok.load(path, target, target_opt)
    assert_same_state(state(target, target_opt), before)


def test_mismatched_optimizer_slots_are_rejected(trained):
    _, _, path = trained
    with pytest.raises(sok.CheckpointError, match="slots"):
        sok.load(path, make_tables(1), keras.optimizers.Adagrad())


KILLED_DUMP = """
import sys, keras, sok_lite as sok
from tests.checkpoint.checkpoint_model import make_tables, train
import sok_lite.io.checkpoint as ck
tables, opt = make_tables(1), keras.optimizers.Adam(0.05)
train(tables, opt, 3)
real_fsync = ck.os.fsync
def slow_fsync(fd):  # stretch the dump so that the kill lands inside it
    print("writing", flush=True)
    import time; time.sleep(30)
ck.os.fsync = slow_fsync
sok.dump(sys.argv[1], tables, opt)
"""


def test_kill_during_dump_keeps_previous_checkpoint(trained, tmp_path):
    _, _, path = trained
    package_parent = pathlib.Path(sok.__file__).resolve().parents[1]  # source tree or wheel
    env = dict(os.environ, PYTHONPATH=str(package_parent), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_DUMP, str(path)], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "writing"
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    tmp = path.with_name(path.name + ".tmp")
    assert tmp.exists(), "the killed dump should have left its temporary directory"
    with pytest.raises(sok.CheckpointError, match="no manifest.json"):
        sok.load(tmp, make_tables(1), keras.optimizers.Adam(0.05))
    fresh, fresh_opt = make_tables(1), keras.optimizers.Adam(0.05)
    sok.load(path, fresh, fresh_opt)  # the previous checkpoint is intact
    assert int(fresh_opt.iterations.numpy()) == 6


def test_hash_owner_matches_the_kernel():
    # The owners computed in Python must match the exchange kernel's, checked through the
    # rows each rank holds in tests/distributed; here: range and spread for 3 ranks.
    keys = np.array([-(2**63), -1, 0, 1, 2**40, 2**63 - 1] + list(range(1000)), np.int64)
    owners = hash_owner(keys, 3)
    assert owners.min() >= 0 and owners.max() <= 2
    assert np.bincount(owners[6:], minlength=3).min() > 250


def test_tf_train_checkpoint_round_trip_with_slots_and_dynamic_tables(tmp_path):
    tables, opt = make_tables(1), keras.optimizers.Adam(0.05)
    train(tables, opt, 6)
    path = tf.train.Checkpoint(tables=tables, optimizer=opt).save(str(tmp_path / "tf"))
    train(tables, opt, 4, first_step=6)

    fresh, fresh_opt = make_tables(1), keras.optimizers.Adam(0.05)
    tf.train.Checkpoint(tables=fresh, optimizer=fresh_opt).restore(path)
    # Slots do not exist until the first step; they are restored as that step creates them.
    train(fresh, fresh_opt, 4, first_step=6)
    assert_same_state(state(fresh, fresh_opt), state(tables, opt), rtol=1e-6)


def test_base_plus_increments_equals_a_full_dump(tmp_path):
    tables, opt = make_tables(1), keras.optimizers.Adam(0.05)
    train(tables, opt, 4)
    sok.dump(tmp_path / "base", tables, opt)
    train(tables, opt, 3, first_step=4)
    sok.dump(tmp_path / "inc1", tables, opt, since_step=4)
    train(tables, opt, 3, first_step=7)
    sok.dump(tmp_path / "inc2", tables, opt, since_step=7)
    sok.dump(tmp_path / "full", tables, opt)

    chained, chained_opt = make_tables(1), keras.optimizers.Adam(0.05)
    sok.load([tmp_path / "base", tmp_path / "inc1", tmp_path / "inc2"], chained, chained_opt)
    full, full_opt = make_tables(1), keras.optimizers.Adam(0.05)
    sok.load(tmp_path / "full", full, full_opt)
    assert_same_state(state(chained, chained_opt), state(full, full_opt))
    assert_same_state(state(chained, chained_opt), state(tables, opt))
    inc = json.loads((tmp_path / "inc2" / "manifest.json").read_text())
    base = json.loads((tmp_path / "full" / "manifest.json").read_text())
    # Increments hold only changed rows: the hash table's are fewer than a full dump's.
    assert inc["files"]["t2.r0.ids"]["rows"] < base["files"]["t2.r0.ids"]["rows"]


def test_a_chain_must_start_with_a_full_dump(trained, tmp_path):
    tables, opt, path = trained
    sok.dump(tmp_path / "inc", tables, opt, since_step=3)
    with pytest.raises(sok.CheckpointError, match="expected a full dump"):
        sok.load([tmp_path / "inc"], make_tables(1), keras.optimizers.Adam(0.05))
    with pytest.raises(ValueError, match="needs the optimizer"):
        sok.dump(tmp_path / "x", tables, since_step=3)


def test_dynamic_table_the_optimizer_never_stepped_round_trips_with_its_slots(tmp_path):
    def build():
        static = sok.Variable(np.arange(12, dtype=np.float32).reshape(6, 2), name="static")
        dynamic = sok.DynamicVariable(2, initializer="random_uniform", name="dynamic")
        return static, dynamic

    static, dynamic = build()
    opt = keras.optimizers.Adam(0.1)
    sok.lookup_sparse(dynamic, tf.ragged.constant([[5, -3], [2**62]], dtype=tf.int64))
    with sok.OptimizerScope([static, dynamic]):
        with tf.GradientTape() as tape:
            out = sok.lookup_sparse(static, tf.ragged.constant([[1, 4]], dtype=tf.int64))
        opt.apply_gradients([(tape.gradient(tf.reduce_sum(out), static), static)])
    sok.dump(str(tmp_path / "ck"), [static, dynamic], opt)

    fresh_static, fresh_dynamic = build()
    fresh_opt = keras.optimizers.Adam(0.1)
    sok.load(str(tmp_path / "ck"), [fresh_static, fresh_dynamic], fresh_opt)
    np.testing.assert_array_equal(fresh_static.numpy(), static.numpy())
    keys, rows = (x.numpy() for x in dynamic.export(with_slots=True))
    fresh_keys, fresh_rows = (x.numpy() for x in fresh_dynamic.export(with_slots=True))
    assert sorted(fresh_keys) == sorted(keys) and fresh_rows.shape == (3, 6)
    order, fresh_order = np.argsort(keys), np.argsort(fresh_keys)
    np.testing.assert_array_equal(fresh_rows[fresh_order, :2], rows[order, :2])
    np.testing.assert_array_equal(fresh_rows[:, 2:], 0)  # Adam's m and v start at 0
