"""examples/online/train.py: the served model (a process without sok_lite) takes every delta
and ends up predicting what the trained model does, its AUC rising as the deltas arrive."""

import json
import subprocess
import sys

from tests.distributed.launcher import REPO


def test_the_served_model_learns_while_it_serves(tmp_path):
    script = REPO / "examples" / "online" / "train.py"
    args = ["--steps", "120", "--delta-every", "30", "--snapshot-every", "3"]
    proc = subprocess.run(
        [sys.executable, str(script), *args, "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    served = [json.loads(line[7:]) for line in lines if line.startswith("served {")]
    assert served[0]["sequence"] == 0 and served[0]["auc"] == 0.5  # untrained: all weights 0
    assert served[-1]["sequence"] == 4 and served[-1]["lag_deltas"] == 0
    assert served[-1]["auc"] > 0.6
    assert "max |difference| 0.00e+00" in proc.stdout
    assert (tmp_path / "deltas" / "snapshot-000000000003").is_dir()
