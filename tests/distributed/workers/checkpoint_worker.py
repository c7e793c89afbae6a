"""Trains and dumps, or loads, the tables of tests/checkpoint/checkpoint_model.py on this job's
ranks, then saves every (global id or key -> value and slots) row this rank holds for the
launching test."""

import sys

import horovod.tensorflow as hvd
import keras
import numpy as np

import sok_lite as sok
from sok_lite.io.checkpoint import CHUNK_ROWS
from tests.checkpoint.checkpoint_model import make_tables, train
from tests.distributed.workers.report import Report

hvd.init()
communicator = sok.init("horovod")
RANK, N = hvd.rank(), hvd.size()
out_dir, action, path = sys.argv[1], sys.argv[2], sys.argv[3]
report = Report(out_dir, RANK)

tables, opt = make_tables(N), keras.optimizers.Adam(0.05)
if action == "save":
    train(tables, opt, 5, RANK, N)
    sok.dump(path, tables, opt)
else:
    sok.load(path, tables, opt)

arrays = {"iterations": np.array(int(opt.iterations.numpy()))}
for t, table in enumerate(tables):
    chunks = list(table.checkpoint_chunks(opt, None, CHUNK_ROWS))
    arrays[f"ids{t}"] = np.concatenate([c[0] for c in chunks]) if chunks else np.zeros([0])
    arrays[f"rows{t}"] = np.concatenate([c[1] for c in chunks]) if chunks else np.zeros([0, 0])
    report.check()
np.savez(f"{out_dir}/state{RANK}.npz", **arrays)
report.write(num_ranks=N)
