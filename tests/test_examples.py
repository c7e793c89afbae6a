"""The examples run end to end (in reduced size) and reach what they promise."""

import pathlib
import re
import subprocess
import sys

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def test_sparse_linear():
    args = ["--features", "1000", "--train-rows", "20000", "--test-rows", "10000"]
    args += ["--steps", "150", "--batch", "512"]
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "sparse_linear.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = re.search(r"test AUC ([0-9.]+)\s+oracle AUC ([0-9.]+)", proc.stdout)
    assert found, proc.stdout
    model_auc, oracle_auc = float(found.group(1)), float(found.group(2))
    assert oracle_auc > 0.75  # the planted model separates the classes
    assert abs(model_auc - oracle_auc) < 0.05, proc.stdout
