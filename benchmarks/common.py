"""Timing and synthetic-id helpers shared by the benchmarks."""

import time

import numpy as np


def zipf_ids(rng, n, vocab, a=1.2):
    """n ids in [0, vocab) drawn Zipf(a): a few ids are very hot, most are rare."""
    return (rng.zipf(a, size=n) - 1) % vocab


def time_step(fn, warmup=5, iters=30):
    """Median wall time of fn() in milliseconds (fn must block until its result is ready)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))


def report(title, ours_ms, peer_ms, peer_name):
    print(f"{title}")
    print(f"  {peer_name:<40s} {peer_ms:8.2f} ms/step")
    print(f"  {'sok_lite':<40s} {ours_ms:8.2f} ms/step")
    print(f"  speed-up (peer / ours): {peer_ms / ours_ms:.2f}x")
