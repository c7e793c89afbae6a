"""A rank killed mid-training ends the whole job within DEADLINE seconds, with output that names
the lost process, and leaves no process running. A rank that raises instead is covered by
test_horovod_errors.py; docs/robustness.md says what detects each failure."""

import json
import os
import re
import subprocess
import sys
import time

import pytest

from tests.distributed.launcher import (
    JOB_MARKER,
    REPO,
    WORKERS,
    run_failing_job,
    tracked_job,
    wait_until_gone,
)
from tests.distributed.test_strategy_lookup import free_ports

DEADLINE = 120
FAIL_AT = 5


def test_sigkilled_horovod_rank_ends_the_job(tmp_path):
    output = run_failing_job(tmp_path, "sigkill", FAIL_AT, DEADLINE)
    # horovodrun names the first rank to exit and its status: 137 = 128 + SIGKILL.
    assert re.search(r"Process name: 1\s+Exit code: 137", output), output[-3000:]


def start_workers(out_dir, failing, marker):
    workers = [f"127.0.0.1:{p}" for p in free_ports(2)]
    procs = []
    for index in range(2):
        env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
        env[JOB_MARKER] = marker
        env["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        )
        worker = [str(WORKERS / "strategy_failure_worker.py"), str(out_dir)]
        procs.append(
            subprocess.Popen(
                [sys.executable, *worker, str(failing), str(FAIL_AT)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return procs


# Worker 0 also hosts TF's coordination service: losing it is a different path for the survivor.
@pytest.mark.parametrize("failing", [1, 0], ids=["worker", "coordination_leader"])
def test_sigkilled_multi_worker_peer_ends_the_survivor(tmp_path, failing):
    with tracked_job() as marker:
        start = time.monotonic()
        procs = start_workers(tmp_path, failing, marker)
        # No launcher watches MultiWorkerMirroredStrategy workers: the survivor must exit alone.
        outputs = [p.communicate(timeout=DEADLINE + 30)[0] for p in procs]
        elapsed = time.monotonic() - start
        leftovers = wait_until_gone(marker)
    survivor = 1 - failing
    everything = "\n".join(outputs)
    assert procs[failing].returncode == -9, everything[-3000:]
    assert procs[survivor].returncode > 0, everything[-3000:]
    for index in (0, 1):
        assert f"worker {index} trained {FAIL_AT} steps" in outputs[index], everything[-3000:]
    # The survivor's error names the lost peer, whichever detection fired first (a broken
    # connection in a collective, or the coordination service's missed heartbeats).
    lost_peer = re.compile(rf"UnavailableError[\s\S]*/job:worker/(replica:0/)?task:{failing}\b")
    assert lost_peer.search(outputs[survivor]), outputs[survivor][-3000:]
    assert "should have failed" not in everything
    assert elapsed < DEADLINE, f"the survivor took {elapsed:.0f} s to exit"
    assert not leftovers, f"processes {leftovers} outlived the job"
