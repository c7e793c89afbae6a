"""Launches a worker script on N local ranks with horovodrun (gloo) and checks every rank."""

import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
import uuid

REPO = pathlib.Path(__file__).resolve().parents[2]
WORKERS = pathlib.Path(__file__).resolve().parent / "workers"


def horovodrun() -> str:
    path = shutil.which("horovodrun") or str(pathlib.Path(sys.executable).parent / "horovodrun")
    if not os.path.exists(path):
        raise RuntimeError("horovodrun not found: run `make test` (it installs Horovod)")
    return path


def launch(
    worker: str, np: int, out_dir: pathlib.Path, *args: str, timeout: int = 300, env_extra=None
):
    """Runs workers/<worker> on `np` ranks; returns (returncode, combined output).

    env_extra: variables added to the ranks' environment (e.g. tracked_job()'s marker).
    """
    env = dict(os.environ, **(env_extra or {}))
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


def run_ranks(
    worker: str, np: int, out_dir: pathlib.Path, *args: str, checks, timeout: int = 300
) -> list[dict]:
    """Runs the worker on `np` ranks; asserts that every rank exited 0 and ran exactly `checks`
    checks (an int for every rank, or a list of one per rank), so that a rank that skips some
    fails. Returns the ranks' reports (read_reports)."""
    code, output = launch(worker, np, out_dir, *args, timeout=timeout)
    assert code == 0, f"horovodrun -np {np} {worker} exited {code}:\n{output[-6000:]}"
    return read_reports(worker, np, out_dir, checks, output)


def read_reports(worker: str, ranks: int, out_dir: pathlib.Path, checks, output="") -> list[dict]:
    """The reports out_dir/rank<r>.json ({"checks": count, ...}) of the worker's ranks; asserts
    that rank r counted checks[r] checks (`checks` if an int). output: the job's output, shown
    when a report is missing."""
    expected = [checks] * ranks if isinstance(checks, int) else list(checks)
    assert len(expected) == ranks, f"{len(expected)} check counts for {ranks} ranks"
    reports = []
    for r, want in enumerate(expected):
        path = out_dir / f"rank{r}.json"
        assert path.exists(), f"{worker} rank {r} wrote no report:\n{output[-3000:]}"
        report = json.loads(path.read_text())
        got = report["checks"]
        assert got == want, f"{worker} rank {r} ran {got} checks, expected {want}"
        reports.append(report)
    return reports


# Every process of a tracked job inherits this variable: horovodrun's ranks run in sessions of
# their own, so neither the launcher's pid nor its process group reaches them.
JOB_MARKER = "SOK_LITE_TEST_JOB"


def job_processes(marker: str) -> list[int]:
    """The live (not zombie) processes whose environment holds JOB_MARKER=marker."""
    needle = f"{JOB_MARKER}={marker}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = pathlib.Path(f"/proc/{entry}/environ").read_bytes()
            state = pathlib.Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if state != "Z" and needle in environ.split(b"\0"):
            pids.append(int(entry))
    return pids


def wait_until_gone(marker: str, seconds: float = 10.0) -> list[int]:
    """Waits up to `seconds` for the job's processes to end; returns those still running."""
    deadline = time.monotonic() + seconds
    while (pids := job_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return pids


@contextlib.contextmanager
def tracked_job():
    """Yields a marker for a job's processes; kills any of them still running afterwards."""
    marker = uuid.uuid4().hex
    try:
        yield marker
    finally:
        for pid in job_processes(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def run_failing_job(out_dir: pathlib.Path, mode: str, fail_at: int, deadline: int) -> str:
    """Runs workers/rank_failure_worker.py on 2 ranks as a tracked job, one rank failing by
    `mode` at step `fail_at`. Checks that both ranks trained until then and that the job failed
    within `deadline` seconds leaving no process behind; returns the job's output."""
    with tracked_job() as marker:
        start = time.monotonic()
        code, output = launch(
            "rank_failure_worker.py",
            2,
            out_dir,
            mode,
            str(fail_at),
            timeout=deadline + 30,
            env_extra={JOB_MARKER: marker},
        )
        elapsed = time.monotonic() - start
        leftovers = wait_until_gone(marker)
    assert code != 0, output[-3000:]
    for rank in (0, 1):
        assert f"rank {rank} trained {fail_at} steps" in output, output[-3000:]
    assert "should have failed" not in output
    assert elapsed < deadline, f"the failing job took {elapsed:.0f} s to exit"
    assert not leftovers, f"processes {leftovers} outlived the job"
    return output
