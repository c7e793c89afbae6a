"""Runs examples/wide_deep/train.py on this rank (arguments after the output directory) and
reports its per-epoch history and final metrics to the launching test
(tests/api/test_examples.py)."""

import pathlib
import sys

# First on the path, so that data.py and model.py are the wide & deep example's.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "examples" / "wide_deep"))

import train  # noqa: E402

import sok_lite as sok  # noqa: E402
from tests.distributed.workers.report import Report  # noqa: E402

out_dir, args = sys.argv[1], sys.argv[2:]
result = train.main(args)
report = Report(out_dir, sok.rank())
report.check(len(result["history"]))
report.write(num_ranks=sok.num_ranks(), **result)
