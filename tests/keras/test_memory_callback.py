"""sok.keras.MemoryReportCallback writes sok.memory_report's numbers as TensorBoard scalars:
read back from the event files and compared with the report and with the tables' shapes."""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.keras import Embedding, MemoryReportCallback, OptimizerWrapper
from sok_lite.memory import hash_table_bytes

ROWS, DIM, BATCH, STEPS = 30, 4, 8, 5


def static_and_hashed_model():
    static_ids = keras.Input(shape=(None,), dtype="int64", ragged=True, name="static_ids")
    hashed_ids = keras.Input(shape=(None,), dtype="int64", ragged=True, name="hashed_ids")
    a = Embedding(ROWS, DIM, name="users")(static_ids)
    b = Embedding(None, DIM, name="clicks")(hashed_ids)
    out = keras.layers.Dense(1)(keras.layers.Concatenate()([a, b]))
    model = keras.Model([static_ids, hashed_ids], out)
    model.compile(optimizer=OptimizerWrapper(keras.optimizers.Adam(0.01)), loss="mse")
    return model


def dataset():
    rng = np.random.default_rng(0)
    n = BATCH * STEPS
    static = [list(rng.integers(0, ROWS, rng.integers(1, 4))) for _ in range(n)]
    hashed = [list(rng.integers(0, 2**40, rng.integers(1, 4))) for _ in range(n)]
    x = (
        tf.ragged.constant(static, dtype=tf.int64, ragged_rank=1),
        tf.ragged.constant(hashed, dtype=tf.int64, ragged_rank=1),
    )
    y = rng.standard_normal([n, 1]).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH), hashed


def read_scalars(log_dir) -> dict:
    """{tag: {step: value}} from every event file under log_dir."""
    found = collections.defaultdict(dict)
    for path in tf.io.gfile.glob(f"{log_dir}/*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                found[value.tag][event.step] = float(tf.make_ndarray(value.tensor))
    return found


def test_callback_writes_the_report_every_n_steps_and_at_the_end(tmp_path):
    model = static_and_hashed_model()
    data, hashed = dataset()
    callback = MemoryReportCallback(str(tmp_path), every_n_steps=2)
    model.fit(data, epochs=1, callbacks=[callback], verbose=0)
    scalars = read_scalars(tmp_path)

    tables = [w for w in model.weights if isinstance(w, (sok.Variable, sok.DynamicVariable))]
    report = sok.memory_report(tables, model.optimizer)
    names = {t.name.split(":")[0]: kind for t, kind in zip(tables, ("static", "hash"))}
    assert [e["name"] for e in report] == list(names)
    report = {e["name"]: e for e in report}
    for name, entry in report.items():
        for field in ("rows_ram", "rows_disk", "bytes_ram", "bytes_disk", "spills", "evictions"):
            steps = scalars[f"sok_lite_memory/{name}/{field}"]
            assert sorted(steps) == [2, 4, 5], (name, field, steps)  # every 2 batches, and the end
            assert steps[5] == entry[field], (name, field)
        # The static table: every row in RAM. The hash table: the share of looked-up ids that
        # found their row (rows created by a lookup are misses).
        expected = 1.0 if entry["kind"] == "static" else entry["hit_rate"]
        assert scalars[f"sok_lite_memory/{name}/hit_rate"][5] == pytest.approx(expected, rel=1e-6)
    # Independent counts: the static table holds all its rows, the hash table every key seen.
    users, clicks = list(names)
    assert scalars[f"sok_lite_memory/{users}/rows_ram"][5] == ROWS
    keys = len({k for s in hashed for k in s})
    assert scalars[f"sok_lite_memory/{clicks}/rows_ram"][5] == keys
    # Adam's two slots: in the static table's slot variables, in the hash table's records.
    assert scalars[f"sok_lite_memory/{users}/bytes_ram"][5] == ROWS * DIM * 4 * 3 + ROWS * 8
    planned = hash_table_bytes(keys, DIM, 2)  # allocated: up to the capacity of its vectors
    assert planned <= scalars[f"sok_lite_memory/{clicks}/bytes_ram"][5] <= 1.15 * planned


def test_tables_sharing_a_name_get_distinct_tags(tmp_path):
    tables = [sok.Variable(np.zeros([n, 2]), dtype=tf.float32, name="same") for n in (3, 4)]
    callback = MemoryReportCallback(str(tmp_path), tables=tables)
    callback.set_model(keras.Sequential())
    callback.write(step=1)
    scalars = read_scalars(tmp_path)
    assert scalars["sok_lite_memory/same/rows_ram"] == {1: 3.0}
    assert scalars["sok_lite_memory/same_2/rows_ram"] == {1: 4.0}


def test_callback_writes_to_a_given_writer_and_tables(tmp_path):
    table = sok.Variable(np.zeros([5, 2]), dtype=tf.float32, name="tiny")
    writer = tf.summary.create_file_writer(str(tmp_path))
    callback = MemoryReportCallback(writer=writer, tables=[table])
    callback.set_model(keras.Sequential())
    report = callback.write(step=7)
    assert report[0]["bytes_ram"] == 5 * 2 * 4
    assert read_scalars(tmp_path)["sok_lite_memory/tiny/bytes_ram"] == {7: 40.0}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "one of log_dir or writer"),
        ({"log_dir": "a", "writer": object()}, "one of log_dir or writer"),
        ({"log_dir": "a", "every_n_steps": 0}, "every_n_steps"),
        ({"log_dir": "a", "every_n_steps": 1.5}, "every_n_steps"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MemoryReportCallback(**kwargs)
