"""The training history of an example as JSON, for benchmarks/plots.py.

    {"example": "dlrm", "command": "python examples/dlrm/train.py ...", "num_ranks": 1,
     "args": {...}, "epochs": [{"epoch": 1, "loss": ..., "auc": ..., ...}],
     "steps": [{"step": 10, "loss": ..., "samples_per_s": ...}]}

The wide & deep example uses this module too.
"""

import argparse
import json
import pathlib
import shlex
import sys


def add_history_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--history-json",
        default=None,
        metavar="PATH",
        help="write the per-epoch and per-logged-step metrics to PATH (rank 0)",
    )


def write_history(
    path: str,
    example: str,
    args: argparse.Namespace,
    argv: list[str] | None,
    num_ranks: int,
    epochs: list[dict],
    steps: list[dict],
) -> None:
    """Writes the history to `path`, creating its directory.

    Args:
      path: the JSON file.
      example: the example's directory name ("dlrm", "wide_deep").
      args: the parsed flags.
      argv: the flags as given to main (None: those of the command line).
      num_ranks: the number of ranks that trained.
      epochs: one dict of metrics per epoch.
      steps: one dict per logged step.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    history = {
        "example": example,
        "command": shlex.join(["python", f"examples/{example}/train.py", *argv]),
        "num_ranks": num_ranks,
        "args": vars(args),
        "epochs": epochs,
        "steps": steps,
    }
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(history, indent=1) + "\n")
