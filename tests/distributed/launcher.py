"""Launches a worker script on N local ranks with horovodrun (gloo) and checks every rank."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
WORKERS = pathlib.Path(__file__).resolve().parent / "workers"


def horovodrun() -> str:
    path = shutil.which("horovodrun") or str(pathlib.Path(sys.executable).parent / "horovodrun")
    if not os.path.exists(path):
        raise RuntimeError("horovodrun not found: run `make test` (it installs Horovod)")
    return path


def launch(worker: str, np: int, out_dir: pathlib.Path, *args: str, timeout: int = 300):
    """Runs workers/<worker> on `np` ranks; returns (returncode, combined output)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # A rank that dies must not leave the others blocked in a collective for long.
    env.setdefault("HOROVOD_GLOO_TIMEOUT_SECONDS", "60")
    cmd = [
        horovodrun(),
        "-np",
        str(np),
        "-H",
        f"localhost:{np}",
        "--gloo",
        sys.executable,
        str(WORKERS / worker),
        str(out_dir),
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    return proc.returncode, proc.stdout + proc.stderr


def run_ranks(worker: str, np: int, out_dir: pathlib.Path, *args: str, timeout: int = 300):
    """Runs the worker on `np` ranks, asserts that every rank exited 0 and reported its checks.

    Each rank writes out_dir/rank<r>.json ({"checks": count, ...}); returns those reports.
    """
    code, output = launch(worker, np, out_dir, *args, timeout=timeout)
    assert code == 0, f"horovodrun -np {np} {worker} exited {code}:\n{output[-6000:]}"
    reports = []
    for r in range(np):
        path = out_dir / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote no report:\n{output[-3000:]}"
        report = json.loads(path.read_text())
        assert report["checks"] > 0, f"rank {r} checked nothing"
        reports.append(report)
    return reports
