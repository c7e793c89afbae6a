"""Checkpoints of 16-bit DynamicVariables: dump / load and tf.train.Checkpoint keep the storage
dtype (the manifest records it; rows travel as float32, the 16-bit values widened exactly), a
float32 table's checkpoint loads into a 16-bit one (rounded to nearest) and back (exactly), and
export_saved_model serves a 16-bit hash table without sok_lite."""

import json

import keras
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from tests.checkpoint.test_half_checkpoint import export_mean_lookup, serve_without_sok_lite

DIM = 5
KEYS = [3, -8, 2**40, 17, 0]
NUMPY = {tf.bfloat16: ml_dtypes.bfloat16, tf.float16: np.float16}
HALF = [tf.bfloat16, tf.float16]


def trained(dtype, name="dyn"):
    """A hash table of KEYS stepped twice by Adam under OptimizerScope, and its optimizer."""
    table = sok.DynamicVariable(
        DIM, initializer=keras.initializers.RandomNormal(stddev=2.0, seed=0), dtype=dtype, name=name
    )
    sok.lookup_sparse(table, tf.ragged.constant([KEYS], tf.int64))
    opt = keras.optimizers.Adam(0.05)
    for step in range(2):
        keys = tf.constant([3, 2**40, KEYS[step]], tf.int64)
        grad = tf.IndexedSlices(tf.ones([3, DIM]) * (step + 1), keys)
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(grad, table)])
    return table, opt


def rows(table) -> dict:
    keys, values = table.export(with_slots=True)
    return dict(zip(keys.numpy().tolist(), values.numpy()))


def assert_same_rows(got: dict, want: dict):
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=str(key))


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
def test_dump_load_keeps_the_storage_dtype(dtype, tmp_path):
    table, opt = trained(dtype)
    saved = rows(table)
    sok.dump(tmp_path / "ck", [table], opt)
    manifest = json.loads((tmp_path / "ck" / "manifest.json").read_text())
    assert manifest["tables"][0]["dtype"] == dtype.name

    fresh = sok.DynamicVariable(DIM, dtype=dtype, name="dyn")
    opt2 = keras.optimizers.Adam(0.05)
    sok.load(tmp_path / "ck", [fresh], opt2)
    assert fresh.dtype == dtype and int(opt2.iterations.numpy()) == 2
    assert_same_rows(rows(fresh), saved)

    # Into a float32 table: the 16-bit values exactly, the slots as they were.
    wide = sok.DynamicVariable(DIM, name="dyn")
    sok.load(tmp_path / "ck", [wide], keras.optimizers.Adam(0.05))
    assert_same_rows(rows(wide), saved)


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
def test_float32_dump_loads_into_16_bits_rounded_to_nearest(dtype, tmp_path):
    full, opt = trained(tf.float32)
    saved = rows(full)
    sok.dump(tmp_path / "f32", [full], opt)
    half = sok.DynamicVariable(DIM, dtype=dtype, name="dyn")
    sok.load(tmp_path / "f32", [half], keras.optimizers.Adam(0.05))
    got = rows(half)
    assert sorted(got) == sorted(saved)
    for key, want in saved.items():
        value = want[:DIM].astype(NUMPY[dtype]).astype(np.float32)
        np.testing.assert_array_equal(got[key][:DIM], value)
        np.testing.assert_array_equal(got[key][DIM:], want[DIM:])  # slots stay float32


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
def test_tf_train_checkpoint_round_trip_and_conversion(dtype, tmp_path):
    table, opt = trained(dtype, name="tfck")
    saved = rows(table)
    path = tf.train.Checkpoint(table=table, optimizer=opt).save(str(tmp_path / "ck"))

    other, opt2 = trained(dtype, name="tfck")
    with sok.OptimizerScope([other]):  # one more step so that the restore changes something
        opt2.apply_gradients([(tf.IndexedSlices(tf.ones([1, DIM]), tf.constant([17])), other)])
    tf.train.Checkpoint(table=other, optimizer=opt2).restore(path)
    assert other.dtype == dtype
    assert_same_rows(rows(other), saved)

    # A float32 table restores the 16-bit checkpoint exactly; a 16-bit table a float32 one
    # rounded to nearest.
    wide, opt3 = trained(tf.float32, name="tfck")
    tf.train.Checkpoint(table=wide, optimizer=opt3).restore(path)
    assert_same_rows(rows(wide), saved)
    wide_path = tf.train.Checkpoint(table=wide, optimizer=opt3).save(str(tmp_path / "wide"))
    tf.train.Checkpoint(table=other, optimizer=opt2).restore(wide_path)
    assert_same_rows(rows(other), saved)


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
def test_saved_model_serves_a_16_bit_hash_table_without_sok_lite(dtype, tmp_path):
    table, _ = trained(dtype, name="served")
    predict = export_mean_lookup(table, tmp_path / "served")
    values, splits = [3, 2**40, 2**40, 99, -8], [0, 3, 3, 5]  # 99: a key the table lacks
    out_dtype, served = serve_without_sok_lite(tmp_path / "served", values, splits)
    assert out_dtype == "float32"
    # After the export: the training lookup creates key 99's row, as the served model computes.
    expected = predict(tf.constant(values, tf.int64), tf.constant(splits, tf.int64)).numpy()
    np.testing.assert_allclose(np.asarray(served), expected, rtol=1e-6, atol=1e-7)
