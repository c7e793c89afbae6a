"""lookup_sparse under MultiWorkerMirroredStrategy: 2 local worker processes on loopback ports."""

import json
import os
import socket
import subprocess
import sys

from tests.distributed.launcher import REPO, WORKERS


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def test_multi_worker_lookup_matches_single_process(tmp_path):
    workers = [f"127.0.0.1:{p}" for p in free_ports(2)]
    procs = []
    for index in range(2):
        env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
        env["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKERS / "strategy_worker.py"), str(tmp_path)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outputs.append(out)
    for index, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"worker {index} exited {p.returncode}:\n{out[-5000:]}"
        report = json.loads((tmp_path / f"rank{index}.json").read_text())
        assert report["checks"] > 0 and report["num_ranks"] == 2
