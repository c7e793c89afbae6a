"""Runs Python code in a fresh interpreter and reads back the JSON line it prints last."""

import json
import subprocess
import sys


def run_python_json(code: str, *args: str, env=None, cwd=None, stdin=None, timeout=300):
    """Runs `python -c code *args` (environment `env`, working directory `cwd`, `stdin` as its
    input); asserts that it exits 0 and returns the JSON value of its last output line."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
