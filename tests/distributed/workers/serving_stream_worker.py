"""Trains the model of tests/online/online_model.py on this job's ranks, then exports it (plain
and updatable) with pieces of 5 rows, so that every table streams from both ranks over many
rounds; rank 0 saves what the trained model gives for a query batch for the launching test.
Last, an export whose hash table fails to read on rank 1 midway raises on both ranks and leaves
nothing behind."""

import pathlib
import sys

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

import sok_lite as sok
from sok_lite.io import serving_stream
from tests.distributed.workers.report import Report
from tests.online.online_model import SPEC, OnlineModel, expected, one_id_batch

PIECE = 5
hvd.init()
sok.init("horovod")
RANK = hvd.rank()
out = pathlib.Path(sys.argv[1])
report = Report(out, RANK)
QUERY = list(range(-30, 30)) + [2**40, -(2**50)]  # the last two never stored
pieces = []
serving_stream.PIECE_ROWS = PIECE
serving_stream.piece_hook = lambda table, rows: pieces.append(len(rows))

model = OnlineModel()
model.train(3, seed=RANK)
model.export(out / "updatable")
sok.export_saved_model(model.predict, out / "plain", SPEC, tables=model.tables)
report.check(max(pieces) <= PIECE)
report.check(len(pieces) > 10)

chunks = type(model.clicks).checkpoint_chunks


def failing(self, *args):
    for n, piece in enumerate(chunks(self, *args)):
        if RANK == 1 and n == 1:
            raise OSError("rank 1 cannot read its rows")
        yield piece


type(model.clicks).checkpoint_chunks = failing
try:
    sok.export_saved_model(model.predict, out / "failed", SPEC, tables=model.tables)
    raised = ""
except (OSError, RuntimeError) as e:
    raised = type(e).__name__
type(model.clicks).checkpoint_chunks = chunks
report.check(raised == ("OSError" if RANK == 1 else "RuntimeError"))
hvd.allreduce(tf.constant(0.0))  # rank 0 has removed what it wrote
report.check(not [p for p in out.iterdir() if "failed" in p.name])
wanted = expected(model, one_id_batch(QUERY))
if RANK == 0:
    np.savez(out / "expected.npz", query=np.array(QUERY), **wanted)
report.write(pieces=pieces, stored=int(model.clicks.size()), raised=raised)
