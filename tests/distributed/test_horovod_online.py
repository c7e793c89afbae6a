"""Deltas on 2 Horovod ranks: each rank writes its own rows' files into one delta, deletions of
keys evicted on either rank included, and the served model (one process) ends up serving what
the 2-rank training model computes. The export itself streams both ranks' rows in small
pieces and serves exactly the training model's rows."""

import numpy as np
import tensorflow as tf

from sok_lite.io import delta_updater
from tests.distributed.launcher import run_ranks
from tests.online.online_model import assert_served_equal, one_id_batch, serve


def test_deltas_of_two_ranks_reach_the_served_model(tmp_path):
    reports = run_ranks("online_worker.py", 2, tmp_path, checks=1)
    assert all(r["evicted"] > 0 for r in reports)
    deltas = delta_updater.list_deltas(tmp_path / "deltas")
    assert [d[0] for d in deltas] == [1, 2, 3]
    last = delta_updater.read_delta(deltas[-1][2])
    assert last.header.world_size == 2
    assert {"t1.r0.deleted", "t1.r1.deleted"} <= set(last.header.files)
    assert len(last.tables[1].deleted) > 0
    model = tf.saved_model.load(str(tmp_path / "served"))
    updater = delta_updater.DeltaUpdater(model, tmp_path / "deltas")
    assert updater.poll() == [1, 2, 3]
    wanted = dict(np.load(tmp_path / "expected.npz"))
    batch = one_id_batch(wanted.pop("query").tolist())
    assert_served_equal(serve(model, batch), wanted)


def test_two_ranks_stream_their_rows_into_the_export(tmp_path):
    reports = run_ranks("serving_stream_worker.py", 2, tmp_path, checks=4)
    assert reports[0]["pieces"] == reports[1]["pieces"]  # every rank gathers every round
    wanted = dict(np.load(tmp_path / "expected.npz"))
    batch = one_id_batch(wanted.pop("query").tolist())
    assert not (tmp_path / "failed").exists()
    for kind in ("plain", "updatable"):
        model = tf.saved_model.load(str(tmp_path / kind))
        assert_served_equal(serve(model, batch), wanted)
