"""Runs raw sok_lite ops in a child process, so that an op that crashes kills the child, not pytest.

The parent (`OpWorker`) sends programs, lists of calls, and gets one result per call back, or a
`WorkerCrash` carrying how the child ended and its crash report (a CHECK failure or a sanitizer
report, from its stderr). Run as a script, this file is the child.

A call is `{"op": "sok_lite_...", "kwargs": {...}, "graph": bool}`. In kwargs, a NumPy array
becomes a constant tensor, {"zeros": shape, "dtype": dtype} a tensor of zeros (NumPy cannot
hold [0, 2**63 - 1]), a dict with a "resource" key a resource handle (see
`_resolve_resource`), a list is converted item by item and anything else is passed as is (attrs).
A table's tier_path of FRESH_DIR becomes a new directory, removed when the program ends.
"""

import importlib.util
import inspect
import os
import pickle
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_HEADER = struct.Struct("<Q")
FRESH_DIR = "<fresh directory>"
_START_TIMEOUT_S = 120.0


class WorkerCrash(Exception):
    """The child died (or hung) while running a program."""


def _write_frame(fd: int, obj) -> None:
    data = pickle.dumps(obj)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int, deadline: float | None = None):
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline))
    return pickle.loads(_read_exact(fd, size, deadline))


# Where a crash report starts: a sanitizer report, a TF CHECK failure, a Python fatal error.
_REPORT_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "Check failed", "Fatal Python")


def _report(stderr: bytes, limit: int = 8000) -> str:
    """The start of the crash report in the child's stderr (its stack comes first), or the tail."""
    text = stderr.decode(errors="replace")
    starts = [i for i in (text.find(m) for m in _REPORT_MARKERS) if i >= 0]
    if not starts:
        return text[-limit:]
    start = text.rfind("\n", 0, min(starts)) + 1
    return text[start : start + limit]


class OpWorker:
    """Parent side: starts the child on first use and again after each crash.

    Args:
      timeout_s: the longest one program may run before the child counts as hung.
    """

    def __init__(self, timeout_s: float = 30.0):
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen | None = None
        self._stderr = tempfile.TemporaryFile()

    def _start(self) -> None:
        # The child must load the same package (and so the same op library) as this process.
        env = dict(os.environ)
        package_root = str(Path(importlib.util.find_spec("sok_lite").origin).parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        # Under sanitizers (scripts/run_sanitized_tests.sh), the child's reports go to its stderr,
        # which a crash report shows, and a UBSan report ends it like a crash would.
        for name in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
            if name in env:
                options = [o for o in env[name].split(":") if o and not o.startswith("log_path=")]
                env[name] = ":".join(options + ["halt_on_error=1"])
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        try:
            ready = _read_frame(self._proc.stdout.fileno(), time.monotonic() + _START_TIMEOUT_S)
        except (EOFError, TimeoutError) as e:
            raise WorkerCrash(f"the op worker did not start: {self._died()}") from e
        assert ready == "ready", ready

    def run(self, program: list[dict]) -> list[dict]:
        """Runs the calls of `program` in order in the child; one result dict per call.

        Raises:
          WorkerCrash: the child died or hung; the message says how and ends with its stderr.
        """
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        self._stderr.seek(0, os.SEEK_END)
        mark = self._stderr.tell()
        try:
            _write_frame(self._proc.stdin.fileno(), program)
            return _read_frame(self._proc.stdout.fileno(), time.monotonic() + self.timeout_s)
        except TimeoutError as e:
            self._proc.kill()
            raise WorkerCrash(f"hung for {self.timeout_s:.0f} s: {self._died(mark)}") from e
        except (EOFError, BrokenPipeError) as e:
            raise WorkerCrash(self._died(mark)) from e

    def _died(self, mark: int = 0) -> str:
        code = self._proc.wait()
        self._proc = None
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        self._stderr.seek(mark)
        return f"{how}\n--- stderr of the op worker ---\n{_report(self._stderr.read())}"

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        self._stderr.close()


# ----------------------------------------------------------------------------- child side


class _Program:
    """Converts the kwargs of one program into tensors; resources live as long as the program."""

    serial = 0

    def __init__(self, tf, lib):
        self.tf, self.lib = tf, lib
        self.resources = {}
        self.dirs = []
        _Program.serial += 1
        self.prefix = f"fuzz{os.getpid()}_{_Program.serial}_"

    def close(self) -> None:
        # A table's tier file stays open with the table (resources outlive the program); on
        # Linux its space is freed once the process ends.
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)

    def convert(self, value):
        tf = self.tf
        if type(value).__module__ == "numpy" and hasattr(value, "dtype"):
            return tf.constant(value)
        if isinstance(value, dict) and "zeros" in value:  # zero-size, any dims: [0, 2**63 - 1]
            return tf.zeros(value["zeros"], value["dtype"])
        if isinstance(value, dict) and "resource" in value:
            key = repr(sorted(value.items()))
            if key not in self.resources:
                self.resources[key] = self._resolve_resource(value)
            return self.resources[key][0]
        if isinstance(value, list):
            return [self.convert(v) for v in value]
        return value

    def _resolve_resource(self, spec):
        """(handle, owner): the handle of a variable, of a missing variable or of a hash table.

        Specs: {"resource": "variable", "shape", "dtype", "fill"}, {"resource": "missing",
        "shape", "dtype"} (a handle to a variable that was never created) and {"resource":
        "table", "name", plus the attrs of SokLiteDynamicTable}. The owner keeps a variable
        alive for the program.
        """
        tf = self.tf
        kind = spec["resource"]
        if kind == "variable":
            var = tf.Variable(tf.cast(tf.fill(spec["shape"], spec.get("fill", 0.0)), spec["dtype"]))
            return var.handle, var
        if kind == "missing":
            name = self.prefix + f"missing{len(self.resources)}"
            handle = tf.raw_ops.VarHandleOp(
                dtype=spec["dtype"], shape=spec["shape"], shared_name=name
            )
            return handle, None
        attrs = {k: v for k, v in spec.items() if k not in ("resource", "name")}
        if attrs.get("tier_path") == FRESH_DIR:
            attrs["tier_path"] = tempfile.mkdtemp(prefix="sok_lite_fuzz_tier_")
            self.dirs.append(attrs["tier_path"])
        handle = self.lib.sok_lite_dynamic_table(shared_name=self.prefix + spec["name"], **attrs)
        return handle, None


def _summarize(np, tf, result) -> list[dict]:
    """Shape, dtype and (when small) value of every output tensor."""
    if result is None or isinstance(result, tf.Operation):
        return []
    if isinstance(result, (list, tuple)):
        return [s for r in result for s in _summarize(np, tf, r)]
    value = np.asarray(result)
    return [
        {
            "shape": value.shape,
            "dtype": str(value.dtype),
            "value": value if value.size <= 100_000 else None,
        }
    ]


def _run_call(np, tf, lib, program, call) -> dict:
    fn = getattr(lib, call["op"], None)
    try:
        inspect.signature(fn).bind(**call["kwargs"])
    except (TypeError, ValueError) as e:  # the fuzz case does not match the op (any more)
        return {"status": "signature", "type": type(e).__name__, "message": str(e)}
    try:
        kwargs = {k: program.convert(v) for k, v in call["kwargs"].items()}
        if call.get("graph"):

            @tf.function(autograph=False)
            def graph_call():
                out = fn(**kwargs)
                return None if isinstance(out, tf.Operation) else out

            result = graph_call()
        else:
            result = fn(**kwargs)
        return {"status": "ok", "outputs": _summarize(np, tf, result)}
    except (tf.errors.OpError, TypeError, ValueError) as e:
        return {"status": "raised", "type": type(e).__name__, "message": _shorten(str(e))}
    except Exception as e:  # noqa: BLE001 - any other exception is a finding, reported as such
        # Except one: TF's graph builder (op_def_library) rejects a captured tensor of the wrong
        # dtype with `assert False, "Unreachable"` instead of a TypeError, whatever the op.
        status = "raised" if isinstance(e, AssertionError) and str(e) == "Unreachable" else ""
        status = status or "unexpected"
        return {"status": status, "type": type(e).__name__, "message": _shorten(str(e))}


def _shorten(message: str) -> str:
    # Inside a tf.function, the kernel's message follows a Python stack: keep both ends.
    return message if len(message) <= 1000 else f"{message[:300]} [...] {message[-600:]}"


def _child_main() -> None:
    # The protocol owns the original stdout; whatever TF prints goes to stderr instead.
    out_fd, in_fd = os.dup(1), sys.stdin.fileno()
    os.dup2(2, 1)
    import numpy as np
    import tensorflow as tf

    from sok_lite._loader import ops

    lib = ops()
    _write_frame(out_fd, "ready")
    while True:
        try:
            calls = _read_frame(in_fd)
        except EOFError:
            return
        program = _Program(tf, lib)
        results = [_run_call(np, tf, lib, program, call) for call in calls]
        program.close()
        _write_frame(out_fd, results)


if __name__ == "__main__":
    _child_main()
