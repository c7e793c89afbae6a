"""Online learning end to end: a model exported with updatable tables takes the deltas a
DeltaWriter writes while training goes on, in a process that cannot import sok_lite, and
then serves what the training model computes; deltas are idempotent, a gap falls back to a
snapshot, damaged deltas change nothing, evicted keys are served as unseen keys."""

import ast
import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from sok_lite.io import delta_updater
from sok_lite.io.serving_init import initial_rows
from tests.online.online_model import (
    OnlineModel,
    assert_served_equal,
    expected,
    one_id_batch,
    random_batch,
    serve,
    serve_in_plain_tf,
)

KEYS = list(range(-30, 30)) + [2**40, -(2**50)]  # trained ones and never-seen ones


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16, tf.float16])
def test_deltas_reach_a_model_served_without_sok_lite(dtype, tmp_path):
    model = OnlineModel(dtype)
    model.train(3, seed=0)
    model.export(tmp_path / "served")
    writer = model.writer(tmp_path / "deltas")
    for seed in (1, 2):
        model.train(2, seed=seed)
        writer.write()
    # Each row alone (compared exactly), and samples of several ids combined as in training.
    batches = [one_id_batch(KEYS), random_batch(np.random.default_rng(9), key_space=40)]
    result = serve_in_plain_tf(tmp_path / "served", tmp_path / "deltas", batches, tmp_path)
    assert result["applied"] == [1, 2]
    status = result["status"]
    assert (status["sequence"], status["lag_deltas"], status["error"]) == (2, 0, None)
    assert status["step"] == int(model.optimizer.iterations)
    for batch, outputs in zip(batches, result["outputs"]):
        assert_served_equal(outputs, expected(model, batch))


@pytest.fixture
def served(tmp_path):
    """A trained model, its updatable export loaded in this process, and a writer."""
    model = OnlineModel()
    model.train(2, seed=0)
    model.export(tmp_path / "served")
    writer = model.writer(tmp_path / "deltas")
    return model, tf.saved_model.load(str(tmp_path / "served")), writer


def test_a_delta_applied_twice_equals_it_applied_once(served):
    model, loaded, writer = served
    model.train(2, seed=1)
    first = writer.write()
    assert delta_updater.apply_delta(loaded, first) is True
    batch = one_id_batch(KEYS)
    once = serve(loaded, batch)
    assert delta_updater.apply_delta(loaded, first) is False
    assert delta_updater.ModelState.of(loaded).sequence == 1
    twice = serve(loaded, batch)
    for name in once:
        np.testing.assert_array_equal(twice[name], once[name])
    assert_served_equal(twice, expected(model, batch))


def test_the_warm_up_changes_nothing(served):
    model, loaded, writer = served
    batch = one_id_batch(KEYS)
    for _ in range(2):  # on the exported state, then on one a delta brought
        before, state = serve(loaded, batch), delta_updater.ModelState.of(loaded)
        delta_updater.warm_up(loaded)
        assert delta_updater.ModelState.of(loaded) == state
        after = serve(loaded, batch)
        for name in before:
            np.testing.assert_array_equal(after[name], before[name])
        model.train(1, seed=state.sequence + 1)
        assert delta_updater.apply_delta(loaded, writer.write()) is True
    assert_served_equal(serve(loaded, batch), expected(model, batch))
    with pytest.raises(delta_updater.DeltaError, match="no delta signatures"):
        delta_updater.warm_up(tf.Module())


def test_a_gap_is_refused_and_the_updater_takes_the_next_snapshot(served, tmp_path):
    model, loaded, writer = served
    paths = []
    for seed in range(4):  # deltas 1, 2, snapshot 3, delta 4
        model.train(1, seed=seed + 1)
        paths.append(writer.write(snapshot=seed == 2))
    assert [p.name.split("-")[0] for p in paths] == ["delta", "delta", "snapshot", "delta"]
    batch = one_id_batch(KEYS)
    before = serve(loaded, batch)
    with pytest.raises(delta_updater.DeltaError, match="sequence gap: the model is at delta 0"):
        delta_updater.apply_delta(loaded, paths[1])
    for name, value in serve(loaded, batch).items():
        np.testing.assert_array_equal(value, before[name])
    # The graph refuses it too, whoever calls the signature.
    with pytest.raises(tf.errors.InvalidArgumentError, match="sequence gap"):
        call_apply(loaded, delta_updater.read_delta(paths[1]))
    assert delta_updater.ModelState.of(loaded).sequence == 0

    delta_updater.apply_delta(loaded, paths[0])
    for f in paths[1].iterdir():  # delta 2 never arrives
        f.unlink()
    paths[1].rmdir()
    updater = delta_updater.DeltaUpdater(loaded, tmp_path / "deltas")
    assert updater.poll() == [3, 4]
    assert updater.status()["error"] is None
    assert_served_equal(serve(loaded, batch), expected(model, batch))


def test_a_gap_without_a_snapshot_is_reported_and_changes_nothing(served, tmp_path):
    model, loaded, writer = served
    for seed in (1, 2, 3):
        model.train(1, seed=seed)
        last = writer.write()
    (tmp_path / "deltas" / "delta-000000000002" / "t0.r0.keys").unlink()
    batch = one_id_batch(KEYS)
    updater = delta_updater.DeltaUpdater(loaded, tmp_path / "deltas")
    assert updater.poll() == [1]
    status = updater.status()
    assert status["sequence"] == 1 and status["lag_deltas"] == 2
    assert "t0.r0.keys: missing file" in status["error"]
    assert status["lag_seconds"] >= 0
    at_one = serve(loaded, batch)
    assert updater.poll() == []
    for name, value in serve(loaded, batch).items():
        np.testing.assert_array_equal(value, at_one[name])
    assert last.name == "delta-000000000003"


def flip_byte(path, offset=0):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def retype_keys(d, dtype):
    """Declares t0.r0.keys of another element type in a header that stays well formed."""
    header = json.loads((d / "header.json").read_text())
    header["files"]["t0.r0.keys"]["dtype"] = dtype
    header["checksum"] = delta_updater.header_checksum(header)
    (d / "header.json").write_text(json.dumps(header))


DAMAGES = {
    "keys typed as floats": (lambda d: retype_keys(d, "<f8"), "elements of type <f8"),
    "keys retyped": (lambda d: retype_keys(d, "<i8"), "truncated or overwritten"),
    "flipped rows": (lambda d: flip_byte(d / "t1.r0.rows", 5), "checksum mismatch"),
    "truncated keys": (
        lambda d: (d / "t0.r0.keys").write_bytes((d / "t0.r0.keys").read_bytes()[:-3]),
        "truncated",
    ),
    "missing rows": (lambda d: (d / "t1.r0.rows").unlink(), "missing file"),
    "altered header": (
        lambda d: (d / "header.json").write_text(
            (d / "header.json").read_text().replace('"step": ', '"step": 1')
        ),
        "header.json: checksum mismatch",
    ),
    "truncated header": (
        lambda d: (d / "header.json").write_text((d / "header.json").read_text()[:50]),
        "unreadable",
    ),
    "no header": (lambda d: (d / "header.json").unlink(), "not a complete delta"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_delta_is_refused_and_changes_nothing(damage, served):
    model, loaded, writer = served
    model.train(2, seed=1)
    path = writer.write()
    spoil, message = DAMAGES[damage]
    spoil(path)
    batch = one_id_batch(KEYS)
    before = serve(loaded, batch)
    with pytest.raises(delta_updater.DeltaError, match=message):
        delta_updater.apply_delta(loaded, path)
    assert delta_updater.ModelState.of(loaded).sequence == 0
    for name, value in serve(loaded, batch).items():
        np.testing.assert_array_equal(value, before[name])


def call_apply(loaded, delta, **changes):
    """Calls the apply signature directly with a delta's tensors (and `changes`)."""
    inputs = {
        "model_id": tf.constant(delta.header.model_id),
        "sequence": tf.constant(delta.header.sequence, tf.int64),
        "step": tf.constant(delta.header.step, tf.int64),
        "snapshot": tf.constant(delta.header.snapshot),
    }
    for t, part in enumerate(delta.tables):
        inputs[f"t{t}_keys"] = tf.constant(part.keys)
        inputs[f"t{t}_rows"] = tf.constant(part.rows)
        inputs[f"t{t}_deleted"] = tf.constant(part.deleted)
    inputs.update(changes)
    return loaded.signatures[delta_updater.APPLY_SIGNATURE](**inputs)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_id": tf.constant("other")}, "of another model"),
        ({"t0_keys": tf.constant([0, 99], tf.int64)}, "table 0 .*users.*: the numbers of keys"),
        (
            {"t0_keys": tf.constant([99], tf.int64), "t0_rows": tf.zeros([1, 4])},
            r"users.*: row ids outside \[0, 20\)",
        ),
        ({"t0_deleted": tf.constant([3], tf.int64)}, "a static table deletes no rows"),
    ],
)
def test_the_apply_signature_refuses_bad_input_and_changes_nothing(change, message, served):
    model, loaded, writer = served
    model.train(1, seed=1)
    delta = delta_updater.read_delta(writer.write())
    batch = one_id_batch(KEYS)
    before = serve(loaded, batch)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        call_apply(loaded, delta, **change)
    assert delta_updater.ModelState.of(loaded).sequence == 0
    for name, value in serve(loaded, batch).items():
        np.testing.assert_array_equal(value, before[name])


def test_another_models_delta_is_refused(tmp_path):
    model = OnlineModel()
    model.train(1, seed=0)
    model.export(tmp_path / "served", model_id="ranking")
    writer = model.writer(tmp_path / "deltas", model_id="ctr")
    model.train(1, seed=1)
    path = writer.write()
    loaded = tf.saved_model.load(str(tmp_path / "served"))
    with pytest.raises(delta_updater.DeltaError, match="of model 'ctr', the model is 'ranking'"):
        delta_updater.apply_delta(loaded, path)


def test_evicted_keys_are_served_as_unseen_keys(served):
    model, loaded, writer = served
    clicks = model.clicks
    stored = sorted(clicks.export()[0].numpy().tolist())
    model.train(1, seed=1)
    # Every other key is looked up 2 more times; evict(steps_unseen=1) drops the rest.
    kept = stored[::2]
    for _ in range(2):
        model.predict(*one_id_batch(kept))
    assert int(clicks.evict(1)) > 0
    gone = sorted(set(stored) - set(clicks.export()[0].numpy().tolist()))
    assert gone
    path = writer.write()
    delta = delta_updater.read_delta(path)
    assert sorted(delta.tables[1].deleted.tolist()) == gone
    delta_updater.apply_delta(loaded, path)
    served_rows = serve(loaded, one_id_batch(gone))["clicks"][: len(gone)]
    fresh = initial_rows(clicks.initializer_spec, tf.constant(gone, tf.int64), 3).numpy()
    np.testing.assert_array_equal(served_rows, fresh)
    assert_served_equal(serve(loaded, one_id_batch(KEYS)), expected(model, one_id_batch(KEYS)))


def test_the_updater_module_imports_nothing_of_sok_lite():
    tree = ast.parse(pathlib.Path(delta_updater.__file__).read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in imported if m.split(".")[0] == "sok_lite"], imported
