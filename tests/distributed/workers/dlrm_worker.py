"""Runs examples/dlrm/train.py on this rank (arguments after the output directory) and reports
the global per-step losses and final metrics to the launching test (tests/api/test_examples.py)."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "examples" / "dlrm"))

import train  # noqa: E402

import sok_lite as sok  # noqa: E402
from tests.distributed.workers.report import Report  # noqa: E402

out_dir, args = sys.argv[1], sys.argv[2:]
result = train.main(args)
report = Report(out_dir, sok.rank())
report.check(len(result["step_losses"]))
report.write(num_ranks=sok.num_ranks(), **result)
