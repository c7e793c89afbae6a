"""Runs examples/sok_classic_demo.py on this rank (arguments after the output directory) and
reports its per-step global losses to the launching test (tests/api/test_examples.py)."""

import sys

import sok_lite as sok
from examples.sok_classic_demo import main
from tests.distributed.workers.report import Report

out_dir, args = sys.argv[1], sys.argv[2:]
losses = main(args)
report = Report(out_dir, sok.rank())
report.check(len(losses))
report.write(num_ranks=sok.num_ranks(), losses=losses)
