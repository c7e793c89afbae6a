"""The serving process of benchmarks/online_freshness_bench.py, in plain TensorFlow (it never
imports sok_lite).

It loads the updatable SavedModel and the delta_updater.py copied next to it, answers requests
from a prepared set one after another for --idle-seconds before the trainer starts (the idle
latency), then, while a DeltaUpdater thread polls every --poll-seconds, until the trainer's
DONE_FILE exists and every delta is applied. It records each request's start and end
(time.time(); the trainer's clock on the same machine) and whether it failed, and each
delta's read and apply (start, end, rows), and writes them to OUT_JSON.

Usage (online_freshness_bench.py starts it):
  python online_freshness_server.py MODEL_DIR DELTA_DIR REQUESTS_NPZ DONE_FILE OUT_JSON
    [--poll-seconds 0.1] [--idle-seconds 5]
It creates DONE_FILE.ready once the idle requests are done.
"""

import argparse
import json
import os
import pathlib
import sys
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.modules["sok_lite"] = None  # this process serves without sok_lite: importing it fails

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# Requests answered after the last delta is applied, so that it is seen by one.
TAIL_REQUESTS = 5


class Recorder:
    """Times each delta's read and apply by wrapping the updater module's two functions."""

    def __init__(self, updater_module) -> None:
        self.deltas: dict[int, dict[str, float]] = {}
        self._lock = threading.Lock()
        self._module = updater_module
        read, apply = updater_module.read_delta, updater_module.apply_delta

        def timed_read(path, *args, **kwargs):
            start = time.time()
            delta = read(path, *args, **kwargs)
            self._note(delta, read_start=start, read_end=time.time())
            return delta

        def timed_apply(model, delta, *args, **kwargs):
            start = time.time()
            applied = apply(model, delta, *args, **kwargs)
            self._note(delta, apply_start=start, apply_end=time.time())
            return applied

        updater_module.read_delta, updater_module.apply_delta = timed_read, timed_apply

    def _note(self, delta, **times: float) -> None:
        if not isinstance(delta, self._module.Delta):
            return
        with self._lock:
            entry = self.deltas.setdefault(delta.header.sequence, {})
            entry.update(times)
            entry["rows"] = int(sum(len(t.keys) for t in delta.tables))
            entry["created"] = delta.header.created

    def applied(self) -> set[int]:
        with self._lock:
            return {s for s, d in self.deltas.items() if "apply_end" in d}


def answer(serve, requests: list[dict], count: int, log: list) -> None:
    """Answers `count` requests (cycling through `requests`), appending (start, end, ok)."""
    for _ in range(count):
        start = time.time()
        try:
            serve(**requests[len(log) % len(requests)])["output_0"].numpy()
            ok = True
        except (tf.errors.OpError, ValueError) as e:  # counted, not fatal: the figure to report
            print(f"server: request failed: {e}", file=sys.stderr)
            ok = False
        log.append((start, time.time(), ok))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("model_dir", "delta_dir", "requests_npz", "done_file", "out_json"):
        parser.add_argument(name)
    parser.add_argument("--poll-seconds", type=float, default=0.1)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    args = parser.parse_args()
    sys.path.insert(0, args.model_dir)  # the trainer copied delta_updater.py there
    import delta_updater

    recorder = Recorder(delta_updater)
    loaded = np.load(args.requests_npz)
    names = sorted({k.split("/")[1] for k in loaded.files})
    count = len({k.split("/")[0] for k in loaded.files})
    requests = [{n: tf.constant(loaded[f"{i}/{n}"]) for n in names} for i in range(count)]
    model = tf.saved_model.load(args.model_dir)
    serve = model.signatures["serving_default"]
    answer(serve, requests, 3, [])  # warm-up

    idle: list = []
    end = time.time() + args.idle_seconds
    while time.time() < end:
        answer(serve, requests, 1, idle)
    updater = delta_updater.DeltaUpdater(model, args.delta_dir)
    updater.start(poll_seconds=args.poll_seconds)
    pathlib.Path(args.done_file + ".ready").touch()

    log: list = []
    done = pathlib.Path(args.done_file)
    while True:
        finished = done.exists()  # read before the status: no delta comes after it
        answer(serve, requests, 1, log)
        if not finished:
            continue  # the status costs a call of the model: read it only at the end
        status = updater.status()
        if status["error"]:
            raise SystemExit(f"server: updater: {status['error']}")
        if status["lag_deltas"] == 0:
            break
    answer(serve, requests, TAIL_REQUESTS, log)
    updater.stop()
    out = {
        "idle_requests": idle,
        "requests": log,
        "deltas": {str(s): d for s, d in sorted(recorder.deltas.items())},
        "poll_seconds": args.poll_seconds,
    }
    pathlib.Path(args.out_json).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
