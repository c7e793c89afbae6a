"""Model versions and replicas: a model the serving system loads anew (a new full export)
takes only the deltas cut after it; several replicas follow one delta stream independently,
a late one catching up through a snapshot; the updaters only read the stream."""

import numpy as np
import tensorflow as tf

from sok_lite.io import delta_updater
from tests.online.online_model import (
    OnlineModel,
    assert_served_equal,
    expected,
    one_id_batch,
    serve,
)

KEYS = list(range(-30, 30)) + [2**40]


def _load(path):
    model = tf.saved_model.load(str(path))
    return model, delta_updater.DeltaUpdater(model, path.parent / "deltas")


def _stream_state(directory):
    """Every file of the delta stream with its size and modification time."""
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
    }


def test_a_new_export_takes_only_the_deltas_cut_after_it(tmp_path):
    model = OnlineModel()
    model.train(2, seed=0)
    model.export(tmp_path / "v1")
    writer = model.writer(tmp_path / "deltas")
    for seed in (1, 2):
        model.train(1, seed=seed)
        writer.write()
    # The new version is exported at the delta just written, then training goes on: the
    # rows changed since then come in delta 3, none twice, none missed.
    model.export(tmp_path / "v2", sequence=writer.sequence)
    model.train(1, seed=3)
    writer.write()
    batch = one_id_batch(KEYS)
    old, old_updater = _load(tmp_path / "v1")
    new, new_updater = _load(tmp_path / "v2")
    assert delta_updater.ModelState.of(new).sequence == 2
    assert new_updater.poll() == [3]
    assert old_updater.poll() == [1, 2, 3]
    for loaded, updater in ((old, old_updater), (new, new_updater)):
        status = updater.status()
        assert (status["sequence"], status["lag_deltas"], status["error"]) == (3, 0, None)
        assert status["step"] == int(model.optimizer.iterations)
        assert_served_equal(serve(loaded, batch), expected(model, batch))


def test_replicas_follow_one_stream_and_a_late_one_catches_up(tmp_path):
    model = OnlineModel()
    model.train(2, seed=0)
    model.export(tmp_path / "served")
    directory = tmp_path / "deltas"
    writer = model.writer(directory, snapshot_every=3, keep_snapshots=1)
    early = [_load(tmp_path / "served") for _ in range(2)]
    batch = one_id_batch(KEYS)
    for seed in range(1, 8):  # deltas 1, 2, snapshot 3, 4, 5, snapshot 6, 7
        model.train(1, seed=seed)
        writer.write()
        if seed == 4:  # writing snapshot 6 later removes deltas 1 to 5
            served = [serve(m, batch) for m, _ in early]
            assert [u.poll() for _, u in early] == [[1, 2, 3, 4]] * 2
            for outputs in served:
                assert_served_equal(outputs, served[0])
    before = _stream_state(directory)
    # A replica started now (or restarted from the export) finds deltas 1 to 5 gone and
    # takes snapshot 6, then delta 7.
    late = _load(tmp_path / "served")
    assert late[1].poll() == [6, 7]
    assert [u.poll() for _, u in early] == [[6, 7]] * 2  # at 4, and 5 is gone: the snapshot
    wanted = expected(model, batch)
    outputs = [serve(m, batch) for m, _ in (*early, late)]
    for replica in outputs:
        assert_served_equal(replica, wanted)
        for name in replica:
            np.testing.assert_array_equal(replica[name], outputs[0][name])
    assert _stream_state(directory) == before  # updaters only read
