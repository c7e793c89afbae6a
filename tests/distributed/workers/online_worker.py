"""Trains the model of tests/online/online_model.py on this job's ranks, exports it with
updatable tables, writes three deltas (the last after evictions on every rank) and, on rank 0,
saves what the trained model gives for a query batch for the launching test."""

import pathlib
import sys

import horovod.tensorflow as hvd
import numpy as np

import sok_lite as sok
from tests.distributed.workers.report import Report
from tests.online.online_model import OnlineModel, expected, one_id_batch

hvd.init()
sok.init("horovod")
RANK = hvd.rank()
out = pathlib.Path(sys.argv[1])
report = Report(out, RANK)
QUERY = list(range(-30, 30)) + [2**40]

model = OnlineModel()
model.train(2, seed=RANK)
model.export(out / "served")
writer = model.writer(out / "deltas")
model.train(2, seed=10 + RANK)
writer.write()
model.train(1, seed=20 + RANK)
writer.write()
for _ in range(2):  # keys 0..9 stay, the others of every rank go
    model.predict(*one_id_batch(list(range(10))))
evicted = int(model.clicks.evict(1))
report.check(evicted > 0)
writer.write()
wanted = expected(model, one_id_batch(QUERY))
if RANK == 0:
    np.savez(out / "expected.npz", query=np.array(QUERY), **wanted)
report.write(evicted=evicted)
