"""DeltaWriter and DeltaCallback: when deltas are written, what they hold, that a failed write
leaves no delta and the writer as it was, and that requests never see half an update."""

import threading
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.io import delta as delta_module
from sok_lite.io import delta_updater, manifest
from sok_lite.io.delta import _distinct
from tests.online.online_model import (
    OnlineModel,
    assert_served_equal,
    expected,
    one_id_batch,
    serve,
)


def test_every_n_steps_and_snapshot_every(tmp_path):
    model = OnlineModel()
    writer = model.writer(tmp_path / "deltas", every_n_steps=2, snapshot_every=3)
    written = []
    for seed in range(6):
        model.train(1, seed=seed)
        written.append(writer.maybe_write())
    names = [None if p is None else p.name for p in written]
    assert names == [
        None,
        "delta-000000000001",
        None,
        "delta-000000000002",
        None,
        "snapshot-000000000003",
    ]
    header = delta_updater.read_header(written[3])
    assert (header.base_step, header.step, header.model_id) == (2, 4, "ctr")
    assert [(t.name, t.kind, t.dim, t.dtype) for t in header.tables] == [
        ("users", "static", 4, "float32"),
        ("clicks", "hash", 3, "float32"),
    ]
    snapshot = delta_updater.read_delta(written[5])
    assert sorted(snapshot.tables[0].keys.tolist()) == list(range(20))  # every row
    assert len(snapshot.tables[1].keys) == int(model.clicks.size())


def test_a_delta_holds_the_rows_changed_since_the_previous_one(tmp_path):
    model = OnlineModel()
    model.train(2, seed=0)
    writer = model.writer(tmp_path / "deltas")
    assert delta_updater.read_delta(writer.write()).tables[0].keys.size == 0  # nothing yet
    ids = tf.constant([3, 3, 5], tf.int64)
    clicks = tf.constant([7, -2], tf.int64)
    with tf.GradientTape() as tape:
        out = model.predict(ids, tf.constant([0, 2, 3], tf.int64), clicks, [0, 1, 2])
        loss = tf.reduce_sum(out["users"]) + tf.reduce_sum(out["clicks"])
    grads = tape.gradient(loss, model.tables)
    with sok.OptimizerScope(model.tables):
        model.optimizer.apply_gradients(zip(grads, model.tables))
    delta = delta_updater.read_delta(writer.write())
    users, hashed = delta.tables
    assert sorted(users.keys.tolist()) == [3, 5]
    # Keys within 2^32 of the smallest take 4 bytes (offsets from it); rows 4 per value.
    files = delta.header.files
    sizes = {n: (files[n].dtype, files[n].base, files[n].size) for n in files if "keys" in n}
    assert sizes == {"t0.r0.keys": ("<u4", 3, 8), "t1.r0.keys": ("<u4", -2, 8)}
    assert (files["t0.r0.rows"].dtype, files["t0.r0.rows"].size) == ("<f4", 2 * 4 * 4)
    np.testing.assert_array_equal(users.rows[np.argsort(users.keys)], model.users.numpy()[[3, 5]])
    assert sorted(hashed.keys.tolist()) == [-2, 7]
    stored = dict(zip(*[a.numpy().tolist() for a in model.clicks.export()]))
    for key, row in zip(hashed.keys.tolist(), hashed.rows.tolist()):
        assert row == stored[key]


@pytest.mark.parametrize(
    "keys, dtype",
    [
        ([5, -7, 2**32 - 8, 11, -7 + 2**31, 0, 3, 1], "<u4"),  # a span just under 2^32
        ([5, -7, 2**32 - 7, 11], "<i8"),  # just over
        ([2**62, -(2**62), 1, 2, 3, 4, 5], "<i8"),
        ([-(2**63), -(2**63) + 5, -(2**63) + 2**32 - 1, -(2**63) + 9], "<u4"),
    ],
)
def test_hash_keys_are_written_narrow_when_they_span_under_2_32(keys, dtype, tmp_path, monkeypatch):
    monkeypatch.setattr(delta_module, "CHUNK_ROWS", 3)  # several chunks, narrowed in place
    model = OnlineModel()
    writer = model.writer(tmp_path / "deltas")
    rows = np.arange(len(keys) * 3, dtype=np.float32).reshape(-1, 3)
    model.clicks.assign(tf.constant(keys, tf.int64), tf.constant(rows), step=1)
    delta = delta_updater.read_delta(writer.write())
    info = delta.header.files["t1.r0.keys"]
    assert (info.dtype, info.base) == (dtype, min(keys) if dtype == "<u4" else 0)
    assert info.size == len(keys) * (4 if dtype == "<u4" else 8)
    order = np.argsort(delta.tables[1].keys)
    np.testing.assert_array_equal(delta.tables[1].keys[order], np.sort(keys))
    np.testing.assert_array_equal(delta.tables[1].rows[order], rows[np.argsort(keys)])


def test_keep_snapshots_removes_what_no_server_needs(tmp_path):
    model = OnlineModel()
    directory = tmp_path / "deltas"
    writer = model.writer(directory, snapshot_every=2, keep_snapshots=1)
    writer.write()
    (directory / "notes.txt").write_text("mine")
    foreign = directory / "delta-000000000000"  # a delta's name, holding a file of the user's
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    for seed in range(4):  # 2 and 4 are snapshots; writing 4 removes 1 to 3
        model.train(1, seed=seed)
        writer.write()
    names = sorted(p.name for p in directory.iterdir())
    assert names == [
        "delta-000000000000",
        "delta-000000000005",
        "notes.txt",
        "snapshot-000000000004",
    ]
    assert (foreign / "keep.txt").read_text() == "mine"


def test_maybe_write_every_seconds(tmp_path):
    model = OnlineModel()
    writer = model.writer(tmp_path / "deltas", every_seconds=0.2)
    assert writer.maybe_write() is None
    time.sleep(0.25)
    assert writer.maybe_write().name == "delta-000000000001"
    assert writer.maybe_write() is None


def test_a_tiered_hash_table_round_trips(tmp_path):
    storage = sok.storage.Disk(tmp_path / "tier", ram_budget="64KiB")
    model = OnlineModel(storage=storage)
    model.train(2, seed=0)
    model.export(tmp_path / "served")
    writer = model.writer(tmp_path / "deltas")
    model.train(3, seed=1)
    writer.write()
    loaded = tf.saved_model.load(str(tmp_path / "served"))
    assert delta_updater.DeltaUpdater(loaded, tmp_path / "deltas").poll() == [1]
    batch = one_id_batch(list(range(-30, 30)))
    assert_served_equal(serve(loaded, batch), expected(model, batch))


def test_a_failed_write_leaves_no_delta_and_the_writer_as_it_was(tmp_path, monkeypatch):
    model = OnlineModel()
    writer = model.writer(tmp_path / "deltas")
    model.train(1, seed=0)
    real = manifest.sha256
    calls = []

    def failing(path):
        calls.append(path)
        if len(calls) == 4:
            raise OSError("disk full")
        return real(path)

    monkeypatch.setattr(manifest, "sha256", failing)
    with pytest.raises(OSError, match="disk full"):
        writer.write()
    assert list((tmp_path / "deltas").iterdir()) == []
    assert (writer.sequence, writer.base_step) == (0, 0)
    monkeypatch.setattr(manifest, "sha256", real)
    path = writer.write()
    assert path.name == "delta-000000000001"
    assert delta_updater.read_delta(path).header.base_step == 0


def test_a_sequence_already_written_is_refused(tmp_path):
    model = OnlineModel()
    model.writer(tmp_path / "deltas").write()
    again = model.writer(tmp_path / "deltas")  # restarted at sequence 0
    with pytest.raises(ValueError, match="delta-000000000001' exists"):
        again.write()
    assert again.sequence == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"model_id": ""}, "model_id must be a non-empty str"),
        ({"every_n_steps": 0}, "every_n_steps must be an int > 0"),
        ({"every_seconds": -1.0}, "every_seconds must be an int or float > 0"),
        ({"snapshot_every": 1.5}, "snapshot_every must be an int > 0"),
        ({"sequence": -1}, "sequence must be an int >= 0"),
    ],
)
def test_bad_arguments_are_refused(kwargs, message, tmp_path):
    model = OnlineModel()
    args = {"model_id": "ctr", **kwargs}
    with pytest.raises(ValueError, match=message):
        sok.DeltaWriter(tmp_path, model.tables, model.optimizer, **args)


def test_a_writer_without_an_optimizer_is_refused(tmp_path):
    with pytest.raises(ValueError, match="the optimizer stepping the tables is needed"):
        sok.DeltaWriter(tmp_path, OnlineModel().tables, None, "ctr")


def test_a_plain_variable_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"table 0 \('plain'\) is a ResourceVariable"):
        sok.DeltaWriter(tmp_path, [tf.Variable([1.0], name="plain")], None, "ctr")


def test_the_keras_callback_writes_deltas_during_fit(tmp_path):
    ids = keras.Input(shape=(2,), dtype="int64", name="ids")
    embedding = sok.keras.Embedding(50, 4, combiner="sum")
    # Deltas carry table rows only: the dense head is frozen, as the served one stays.
    model = keras.Model(ids, keras.layers.Dense(1, trainable=False)(embedding(ids)))
    model.compile(optimizer=sok.OptimizerWrapper(keras.optimizers.Adam(0.05)), loss="mse")
    x = np.random.default_rng(0).integers(0, 50, size=(64, 2))
    y = np.ones([64, 1], np.float32)
    model.fit(x[:8], y[:8], batch_size=8, verbose=0)  # builds the optimizer
    spec = [tf.TensorSpec([None, 2], tf.int64)]
    sok.export_saved_model(model, tmp_path / "served", spec, updatable=True, model_id="ctr")
    callback = sok.keras.DeltaCallback(tmp_path / "deltas", "ctr", every_n_steps=3)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[callback])
    # 8 batches: deltas after steps 3 and 6, and one at the end for the last 2.
    assert [p.name for p in callback.written] == [f"delta-00000000000{i}" for i in (1, 2, 3)]
    loaded = tf.saved_model.load(str(tmp_path / "served"))
    updater = delta_updater.DeltaUpdater(loaded, tmp_path / "deltas")
    assert updater.poll() == [1, 2, 3]
    query = tf.constant(x[:10], tf.int64)
    served = loaded.signatures["serving_default"](ids=query)
    np.testing.assert_allclose(
        list(served.values())[0].numpy(), model(query).numpy(), rtol=1e-5, atol=1e-6
    )


def test_requests_never_see_half_an_update(tmp_path):
    """Updates set every row of both tables to k; each request reads both tables and must
    find one k in all of them, while updates run in another thread."""
    rows = 20000  # an update takes long enough for requests to land inside it
    users = sok.Variable(np.zeros([rows, 2]), dtype=tf.float32, name="users")
    clicks = sok.DynamicVariable(2, initializer="zeros", name="clicks")
    keys = tf.range(rows, dtype=tf.int64)
    clicks.assign(keys, tf.zeros([rows, 2]))

    def predict(user_ids, click_ids):
        def mean(table, ids):
            ids = tf.RaggedTensor.from_row_splits(ids, [0, tf.size(ids)])
            return sok.lookup_sparse(table, ids, combiners="mean")

        users_mean = mean(users, user_ids)
        # Work between the two reads, which the second one waits for: an update landing
        # between them would be seen by one read and not by the other.
        square = tf.fill([256, 256], users_mean[0, 0])
        later = tf.cast(tf.reduce_sum(tf.matmul(square, square)) * 0.0, tf.int64)
        return tf.concat([users_mean, mean(clicks, click_ids + later)], axis=1)

    spec = [tf.TensorSpec([None], tf.int64)] * 2
    path = tmp_path / "served"
    sok.export_saved_model(predict, path, spec, [users, clicks], updatable=True, model_id="m")
    loaded = tf.saved_model.load(str(path))
    apply = loaded.signatures[delta_updater.APPLY_SIGNATURE]
    serve_fn = loaded.signatures["serving_default"]
    stop = threading.Event()
    applied, failed = [], []

    def update():
        k = 0
        try:
            while not stop.is_set():
                k += 1
                apply(
                    model_id=tf.constant("m"),
                    sequence=tf.constant(k, tf.int64),
                    step=tf.constant(k, tf.int64),
                    snapshot=tf.constant(False),
                    t0_keys=keys,
                    t0_rows=tf.fill([rows, 2], float(k)),
                    t0_deleted=tf.zeros([0], tf.int64),
                    t1_keys=keys,
                    t1_rows=tf.fill([rows, 2], float(k)),
                    t1_deleted=tf.zeros([0], tf.int64),
                )
                applied.append(k)
        except Exception as e:  # reported by the main thread
            failed.append(e)

    thread = threading.Thread(target=update)
    thread.start()
    seen = set()
    user_ids = click_ids = tf.constant([0, rows - 1], tf.int64)
    deadline = time.monotonic() + 120
    try:
        requests = 0
        while (requests < 300 or len(applied) < 5) and not failed and time.monotonic() < deadline:
            out = list(serve_fn(user_ids=user_ids, click_ids=click_ids).values())[0].numpy()
            assert np.all(out == out[0, 0]), out  # one update's values everywhere
            seen.add(float(out[0, 0]))
            requests += 1
    finally:
        stop.set()
        thread.join()
    assert not failed, failed
    assert len(applied) >= 5 and len(seen) > 1, (len(applied), seen)
    assert delta_updater.ModelState.of(loaded).sequence == applied[-1]
    assert len(seen) > 1  # requests ran between updates


@pytest.mark.parametrize("size", [0, 1, 2, 1000])
def test_the_writers_distinct_keys_equal_numpys(size):
    keys = np.random.default_rng(size).integers(-(2**62), 2**62, size) // 2**60  # repeats
    np.testing.assert_array_equal(_distinct(keys), np.unique(keys))
