"""Runs examples/<example>/train.py on this rank (arguments: the output directory, the example,
then the example's arguments) and reports what train.main returned to the launching test
(tests/api/test_examples.py); one check per training step (dlrm) or epoch (wide_deep) it
recorded."""

import importlib
import pathlib
import sys

out_dir, example, args = sys.argv[1], sys.argv[2], sys.argv[3:]
# First on the path, so that train.py and the modules it imports are this example's.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "examples" / example))

import sok_lite as sok  # noqa: E402
from tests.distributed.workers.report import Report  # noqa: E402

RECORDED = {"dlrm": "step_losses", "wide_deep": "history"}

result = importlib.import_module("train").main(args)
report = Report(out_dir, sok.rank())
report.check(len(result[RECORDED[example]]))
report.write(num_ranks=sok.num_ranks(), **result)
