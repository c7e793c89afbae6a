"""Runs a worker script as N MultiWorkerMirroredStrategy workers (local processes, TF_CONFIG on
free loopback ports) or as one process, and checks that every process exits 0."""

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.distributed.launcher import REPO, WORKERS


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _env(tf_config: dict | None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return env


def run_workers(worker: str, num_workers: int, *args: str, timeout: int = 240) -> list[str]:
    """Runs workers/<worker> *args as `num_workers` MultiWorkerMirroredStrategy workers (none:
    one process without TF_CONFIG); asserts every process exits 0 and returns their outputs."""
    addresses = [f"127.0.0.1:{p}" for p in free_ports(num_workers)]
    procs = []
    for index in range(max(num_workers, 1)):
        tf_config = None
        if num_workers:
            cluster = {"worker": addresses}
            tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKERS / worker), *args],
                env=_env(tf_config),
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:  # a worker left waiting in a collective for its dead peer
            if p.poll() is None:
                p.kill()
    for index, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"{worker} process {index} exited {p.returncode}:\n{out[-5000:]}"
    return outputs


def one_process_output(worker: str):
    """A module-scoped fixture: the folder that workers/<worker> "single" wrote, run as one
    process without a strategy (the reference of the strategy runs)."""

    @pytest.fixture(scope="module")
    def fixture(tmp_path_factory):
        out = tmp_path_factory.mktemp("single")
        run_workers(worker, 0, str(out), "single")
        return out

    return fixture
