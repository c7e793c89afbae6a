"""Checkpoints of 16-bit tables: dump / load and tf.train.Checkpoint keep the storage dtype (the
manifest records it), a float32 dump loads into a 16-bit table (rounded to nearest) and back
(exactly), and export_saved_model serves a 16-bit table without sok_lite."""

import json
import os

import keras
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from tests.python_json import run_python_json

ROWS, DIM = 11, 5
NUMPY = {tf.bfloat16: ml_dtypes.bfloat16, tf.float16: np.float16, tf.float32: np.float32}


def trained(dtype, name="emb", slot_dtype=None, first_grad=1.0):
    """A table stepped twice by Adam under OptimizerScope (gradients of all first_grad, then
    first_grad + 1), and its optimizer."""
    values = np.random.default_rng(0).standard_normal([ROWS, DIM]).astype(np.float32)
    table = sok.Variable(values, dtype=dtype, slot_dtype=slot_dtype, name=name)
    opt = keras.optimizers.Adam(0.05)
    for step in range(2):
        rows = tf.constant([1, 4, 7 + step], tf.int64)
        grad = tf.IndexedSlices(tf.ones([3, DIM]) * (step + first_grad), rows, [ROWS, DIM])
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(grad, table)])
    return table, opt


def bits(table) -> np.ndarray:
    return table.numpy().view(np.uint16)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_dump_load_keeps_the_storage_dtype(dtype, tmp_path):
    table, opt = trained(dtype)
    slots = {k: v.numpy() for k, v in sok.opt_slots(opt, table).items()}
    sok.dump(tmp_path / "ck", [table], opt)
    manifest = json.loads((tmp_path / "ck" / "manifest.json").read_text())
    assert manifest["tables"][0]["dtype"] == dtype.name
    # Rows files hold float32: the 16-bit values widened (exact), then the float32 slots.
    info = manifest["files"]["t0.r0.rows"]
    assert info["bytes"] == ROWS * DIM * 3 * 4 and info["width"] == DIM * 3

    fresh = sok.Variable(np.zeros([ROWS, DIM]), dtype=dtype, name="emb")
    opt2 = keras.optimizers.Adam(0.05)
    sok.load(tmp_path / "ck", [fresh], opt2)
    assert int(opt2.iterations.numpy()) == 2
    assert fresh.dtype == dtype
    np.testing.assert_array_equal(bits(fresh), bits(table))
    for name, slot in sok.opt_slots(opt2, fresh).items():
        assert slot.dtype == tf.float32
        np.testing.assert_array_equal(slot.numpy(), slots[name])


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_float32_dump_loads_into_16_bits_and_back(dtype, tmp_path):
    values = np.random.default_rng(1).standard_normal([ROWS, DIM]).astype(np.float32) * 3
    full = sok.Variable(values, name="emb")
    sok.dump(tmp_path / "f32", [full])
    half = sok.Variable(np.zeros([ROWS, DIM]), dtype=dtype, name="emb")
    sok.load(tmp_path / "f32", [half])
    np.testing.assert_array_equal(bits(half), values.astype(NUMPY[dtype]).view(np.uint16))

    sok.dump(tmp_path / "half", [half])
    back = sok.Variable(np.zeros([ROWS, DIM]), name="emb")
    sok.load(tmp_path / "half", [back])
    np.testing.assert_array_equal(back.numpy(), half.numpy().astype(np.float32))


def test_dtype_that_cannot_convert_is_refused(tmp_path):
    half = sok.Variable(np.zeros([ROWS, DIM]), dtype=tf.bfloat16, name="emb")
    sok.dump(tmp_path / "ck", [half])
    manifest_path = tmp_path / "ck" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["tables"][0]["dtype"] = "int32"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(sok.CheckpointError, match="dtype 'int32', the variable has 'bfloat16'"):
        sok.load(tmp_path / "ck", [half])


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_tf_train_checkpoint_round_trip(dtype, tmp_path):
    table, opt = trained(dtype, name="tfck")
    saved_bits = bits(table)
    saved_slots = {k: v.numpy() for k, v in sok.opt_slots(opt, table).items()}
    path = tf.train.Checkpoint(table=table, optimizer=opt).save(str(tmp_path / "ck"))

    other, opt2 = trained(dtype, name="tfck")
    with sok.OptimizerScope([other]):  # one more step so that the restore changes something
        grad = tf.IndexedSlices(tf.ones([1, DIM]), tf.constant([0], tf.int64), [ROWS, DIM])
        opt2.apply_gradients([(grad, other)])
    tf.train.Checkpoint(table=other, optimizer=opt2).restore(path)
    assert other.dtype == dtype
    np.testing.assert_array_equal(bits(other), saved_bits)
    for name, slot in sok.opt_slots(opt2, other).items():
        np.testing.assert_array_equal(slot.numpy(), saved_slots[name])


SERVE = """
import json, sys
sys.modules["sok_lite"] = None  # importing sok_lite would fail: the model must not need it
import tensorflow as tf
values, splits = json.loads(sys.stdin.read())
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
args = {"values": tf.constant(values, tf.int64), "splits": tf.constant(splits, tf.int64)}
out = list(serve(**args).values())[0]
print(json.dumps([out.dtype.name, out.numpy().tolist()]))
"""


def export_mean_lookup(table, path):
    """Exports a mean lookup_sparse of `table` on a ragged batch (values, splits) as a SavedModel
    at `path`; returns the lookup."""

    def predict(values, splits):
        ids = tf.RaggedTensor.from_row_splits(values, splits)
        return sok.lookup_sparse(table, ids, combiners="mean")

    spec = [tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.int64)]
    sok.export_saved_model(predict, path, spec, tables=[table])
    return predict


def serve_without_sok_lite(path, values, splits) -> tuple[str, list]:
    """(output dtype name, output) of the SavedModel at `path` on the ragged batch (values,
    splits), served by a process in which sok_lite cannot be imported."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    out_dtype, served = run_python_json(
        SERVE, str(path), env=env, stdin=json.dumps([values, splits])
    )
    return out_dtype, served


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_saved_model_serves_a_16_bit_table_without_sok_lite(dtype, tmp_path):
    table, _ = trained(dtype, name="served")
    predict = export_mean_lookup(table, tmp_path / "served")
    values, splits = [1, 4, 4, 10, 0], [0, 3, 3, 5]
    expected = predict(tf.constant(values, tf.int64), tf.constant(splits, tf.int64)).numpy()
    out_dtype, served = serve_without_sok_lite(tmp_path / "served", values, splits)
    assert out_dtype == "float32"
    np.testing.assert_allclose(np.asarray(served), expected, rtol=1e-6, atol=1e-7)
