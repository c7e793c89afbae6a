"""Timing and synthetic-id helpers shared by the benchmarks."""

import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import numpy as np


def io_bytes() -> tuple[int, int]:
    """(rchar, wchar) of /proc/self/io: bytes this process read and wrote by system calls."""
    fields = dict(
        line.split(": ") for line in pathlib.Path("/proc/self/io").read_text().split("\n") if line
    )
    return int(fields["rchar"]), int(fields["wchar"])


def memory_setting() -> str:
    """The paths a run took that depend on the machine: the kernel's transparent-huge-page
    mode, where sok_lite asks for huge pages (new tables and slots unless
    SOK_LITE_HUGE_PAGES=0; =1 also collapses tables written before), whether glibc's malloc
    asks for them for every block it maps (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, read when the
    process starts: docs/user_guide.md, "Static tables"), TensorFlow's CPU
    allocator (malloc, or its caching BFC allocator with TF_CPU_ALLOCATOR_USE_BFC=true:
    docs/user_guide.md, "Static tables") and the update path (the table's backward pass and its
    optimizer run as separate ops)."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            thp = next(w.strip("[]") for w in f.read().split() if w.startswith("["))
    except (OSError, StopIteration):
        thp = "unknown"
    huge = {"1": "new buffers + collapse", "0": "off"}.get(
        os.environ.get("SOK_LITE_HUGE_PAGES", ""), "new buffers"
    )
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    malloc_huge = "on" if "glibc.malloc.hugetlb=1" in tunables.split(":") else "off"
    bfc = os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "").lower() in ("1", "true")
    return (
        f"transparent huge pages: {thp}; sok_lite huge pages: {huge}; "
        f"malloc huge pages: {malloc_huge}; "
        f"TF CPU allocator: {'bfc' if bfc else 'malloc'}; update: unfused"
    )


ROOT = pathlib.Path(__file__).resolve().parents[1]


def add_autotune_option(parser) -> None:
    """--autotune on|off on an argparse parser, for with_autotune."""
    parser.add_argument(
        "--autotune",
        choices=["on", "off"],
        default="on",
        help="tf.data autotuning of the input pipeline, the same for every model (on: "
        "TensorFlow's default; off: no autotuning thread, whose slow mode makes some fit calls "
        "40-70%% slower on 2 cores whatever the model: docs/benchmarks.md)",
    )


def with_autotune(dataset, autotune: str):
    """`dataset` with tf.data autotuning "on" (TensorFlow's default) or "off"."""
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = autotune == "on"
    return dataset.with_options(options)


def build_native(
    name: str, sources: list[str], out: pathlib.Path, flags: list[str]
) -> pathlib.Path:
    """Compiles `sources` (paths from the repository root) into out/name with $CXX, else g++ or
    c++ from PATH, and `flags`; returns the executable."""
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        raise SystemExit("the native benchmarks need a C++ compiler (g++ or $CXX)")
    exe = out / name
    cmd = [cxx, *flags, "-std=c++17", f"-I{ROOT}", "-o", str(exe)]
    subprocess.run(cmd + [str(ROOT / s) for s in sources], check=True)
    return exe


def native_runs(name: str, sources: list[str], runs: list[list]):
    """Builds `sources` into a temporary executable at the op library's -O3 (build_native), runs
    it once per argument list of `runs` and yields, per run, the JSON objects it printed, one a
    line."""
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_native(name, sources, pathlib.Path(tmp), ["-O3", "-fno-math-errno"])
        for args in runs:
            out = subprocess.run(
                [str(exe), *map(str, args)], check=True, capture_output=True, text=True
            )
            yield [json.loads(line) for line in out.stdout.splitlines()]


def zipf_ids(rng, n, vocab, a=1.2):
    """n ids in [0, vocab) drawn Zipf(a): a few ids are very hot, most are rare."""
    return (rng.zipf(a, size=n) - 1) % vocab


def time_steps(fns, warmup=5, iters=30):
    """Median wall time in ms of each fn() (each must block until its result is ready).

    The functions run interleaved, one call each per round, so that drift in machine load
    affects all of them alike.
    """
    for fn in fns:
        for _ in range(warmup):
            fn()
    times = [[] for _ in fns]
    for _ in range(iters):
        for fn, t in zip(fns, times):
            start = time.perf_counter()
            fn()
            t.append((time.perf_counter() - start) * 1e3)
    return [float(np.median(t)) for t in times]


def time_blocks(fns, rounds=6, iters=30):
    """Median wall time in ms of each fn(), each run alone for `iters` calls per block.

    Blocks of the functions alternate for `rounds` rounds (drift in machine load affects all
    alike); within a block every call follows a call of the same function, as the steps of a
    training loop do, so each finds the caches as its own previous step left them.
    """
    medians = [[] for _ in fns]
    for _ in range(rounds):
        for fn, m in zip(fns, medians):
            m.append(time_steps([fn], warmup=2, iters=iters)[0])
    return [float(np.median(m)) for m in medians]


def cycling(step, inputs):
    """A no-argument callable that runs step(*inputs[i]) with i = 0, 1, 2, ... modulo len."""
    state = {"i": 0}

    def call():
        args = inputs[state["i"] % len(inputs)]
        state["i"] += 1
        return step(*args)

    return call


def report(title, ours_ms, peer_ms, peer_name):
    print(f"{title}")
    print(f"  {peer_name:<40s} {peer_ms:8.2f} ms/step")
    print(f"  {'sok_lite':<40s} {ours_ms:8.2f} ms/step")
    print(f"  speed-up (peer / ours): {peer_ms / ours_ms:.2f}x")
