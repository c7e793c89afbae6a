"""Checkpoints of tables with bfloat16 optimizer slots: dump / load and tf.train.Checkpoint keep
the slot dtype of the table loaded into and convert: bfloat16 slots widen exactly into float32
slots, float32 slots round to nearest into bfloat16 ones (oracle: ml_dtypes' conversion)."""

import json

import keras
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from tests.checkpoint.test_half_checkpoint import DIM, ROWS
from tests.checkpoint.test_half_checkpoint import trained as trained_table


def trained(slot_dtype, name="emb"):
    """A bfloat16 table stepped twice by Adam under OptimizerScope, and its optimizer."""
    return trained_table(tf.bfloat16, name, slot_dtype, first_grad=1.3)


def slot_values(opt, table) -> dict:
    return {k: v.numpy().astype(np.float32) for k, v in sok.opt_slots(opt, table).items()}


def to_bf16(x: np.ndarray) -> np.ndarray:
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def fresh(slot_dtype):
    return sok.Variable(np.zeros([ROWS, DIM]), dtype=tf.bfloat16, slot_dtype=slot_dtype, name="emb")


@pytest.mark.parametrize(
    "saved,loaded",
    [(tf.bfloat16, tf.bfloat16), (tf.bfloat16, tf.float32), (tf.float32, tf.bfloat16)],
    ids=["bf16-bf16", "bf16-f32", "f32-bf16"],
)
def test_dump_load_converts_slots_to_the_loading_table(saved, loaded, tmp_path):
    table, opt = trained(saved)
    want = slot_values(opt, table)
    sok.dump(tmp_path / "ck", [table], opt)
    meta = json.loads((tmp_path / "ck" / "manifest.json").read_text())["tables"][0]
    assert meta["slot_dtype"] == saved.name
    assert meta["dtype"] == "bfloat16"

    other = fresh(loaded)
    opt2 = keras.optimizers.Adam(0.05)
    sok.load(tmp_path / "ck", [other], opt2)
    np.testing.assert_array_equal(other.numpy().view(np.uint16), table.numpy().view(np.uint16))
    got = sok.opt_slots(opt2, other)
    assert got.keys() == want.keys()
    for name, slot in got.items():
        assert slot.dtype == loaded, name
        expect = to_bf16(want[name]) if loaded == tf.bfloat16 else want[name]
        np.testing.assert_array_equal(slot.numpy().astype(np.float32), expect, err_msg=name)


@pytest.mark.parametrize(
    "saved,loaded",
    [(tf.bfloat16, tf.bfloat16), (tf.bfloat16, tf.float32), (tf.float32, tf.bfloat16)],
    ids=["bf16-bf16", "bf16-f32", "f32-bf16"],
)
def test_tf_train_checkpoint_converts_slots(saved, loaded, tmp_path):
    table, opt = trained(saved, name="tfck")
    want = slot_values(opt, table)
    path = tf.train.Checkpoint(table=table, optimizer=opt).save(str(tmp_path / "ck"))

    other, opt2 = trained(loaded, name="tfck")
    with sok.OptimizerScope([other]):  # one more step so that the restore changes something
        grad = tf.IndexedSlices(tf.ones([1, DIM]), tf.constant([0], tf.int64), [ROWS, DIM])
        opt2.apply_gradients([(grad, other)])
    tf.train.Checkpoint(table=other, optimizer=opt2).restore(path).assert_existing_objects_matched()
    np.testing.assert_array_equal(other.numpy().view(np.uint16), table.numpy().view(np.uint16))
    for name, slot in sok.opt_slots(opt2, other).items():
        assert slot.dtype == loaded, name
        expect = to_bf16(want[name]) if loaded == tf.bfloat16 else want[name]
        np.testing.assert_array_equal(slot.numpy().astype(np.float32), expect, err_msg=name)


def test_tf_train_checkpoint_restores_bf16_slots_created_after_the_restore(tmp_path):
    """Deferred restoration: slots made by the first step after restore() get the saved values."""
    table, opt = trained(tf.bfloat16, name="late")
    want = slot_values(opt, table)
    path = tf.train.Checkpoint(table=table, optimizer=opt).save(str(tmp_path / "ck"))
    other = sok.Variable(
        np.zeros([ROWS, DIM]), dtype=tf.bfloat16, slot_dtype=tf.bfloat16, name="late"
    )
    opt2 = keras.optimizers.Adam(0.05)
    tf.train.Checkpoint(table=other, optimizer=opt2).restore(path)
    with sok.OptimizerScope([other]):
        grad = tf.IndexedSlices(tf.zeros([1, DIM]), tf.constant([0], tf.int64), [ROWS, DIM])
        opt2.apply_gradients([(grad, other)])
    got = slot_values(opt2, other)
    rows = np.arange(1, ROWS)  # row 0 took the extra (zero-gradient) step
    for name in want:
        np.testing.assert_array_equal(got[name][rows], want[name][rows], err_msg=name)
