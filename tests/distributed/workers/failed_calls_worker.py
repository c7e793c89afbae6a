"""Runs, on every rank of a Horovod job, the failures of tests/robustness/failure_registry.py
that every rank meets alike before any exchange, on each table kind, and holds each rank's
state after the failed call to the state before."""

import pathlib
import sys

import horovod.tensorflow as hvd
import tensorflow as tf

import sok_lite as sok
from tests.distributed.workers.report import Report
from tests.robustness.failure_registry import failures_on_every_rank
from tests.robustness.worlds import KINDS, assert_unchanged, make_world, snapshot

hvd.init()
communicator = sok.init("horovod")
out_dir = pathlib.Path(sys.argv[1])
report = Report(out_dir, hvd.rank())

FAILURES_ON_EVERY_RANK = failures_on_every_rank()


def sync() -> None:
    communicator.allreduce_sum(tf.constant(1, tf.int32)).numpy()


for kind in KINDS:
    root = out_dir / kind  # shared by the ranks, as a checkpoint directory is
    if hvd.rank() == 0:
        root.mkdir()
    sync()
    world = make_world(kind, root)
    for call, failure in FAILURES_ON_EVERY_RANK:
        if kind not in failure.kinds:
            continue
        label = f"rank {hvd.rank()}: {call} ({failure.name}, {kind} table)"
        before = snapshot(world)
        try:
            failure.call(world, None)
        except failure.error:
            pass
        else:
            raise AssertionError(f"{label} did not fail")
        assert_unchanged(before, snapshot(world), label)
        report.check()
        sync()
report.write(cases=len(FAILURES_ON_EVERY_RANK))
