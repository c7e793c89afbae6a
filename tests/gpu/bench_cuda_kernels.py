"""Achieved bandwidth of the combine kernels against the device's own copy bandwidth.

Batch: 16,384 samples x 26 features x 10 ids (each feature a separate ragged sample, as the
fused lookup sees it), d = 128, float32, weighted mean, ids spread uniformly over the unique
rows. Bytes counted: forward reads one table row per id plus the index arrays and writes one
output row per sample; backward reads grad_out once per sample and does one read-modify-write
of a row per id (counted twice), plus zeroing grad_rows. Copy bandwidth counts read + write.

Hash table: 2^24 distinct random int64 keys inserted into 2^25 slots (load 0.5), then a batch
of 2^24 present keys (shuffled) is found: keys per second of the find alone (slot indices out),
and of find-or-insert on the same present keys (slots and d = 128 rows out).

usage: python tests/gpu/bench_cuda_kernels.py [--json PATH]
"""

import argparse
import json

import cupy as cp
import gpu_lib
import numpy as np

BATCH, FEATURES, IDS_PER_SAMPLE, DIM = 16_384, 26, 10, 128
NUM_UNIQUE = 2_000_000
TABLE_KEYS, TABLE_CAPACITY = 1 << 24, 1 << 25


def time_ms(fn, warmup=3, iters=20):
    for _ in range(warmup):
        fn()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) / iters


def copy_bandwidth():
    nbytes = 1 << 30
    src = cp.ones(nbytes // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    stream = cp.cuda.get_current_stream().ptr
    kind = cp.cuda.runtime.memcpyDeviceToDevice

    def copy():
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, kind, stream)

    return 2 * nbytes / time_ms(copy) / 1e6


def hash_table_rates(lib):
    """Keys per second of find and of find-or-insert on present keys."""
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, TABLE_KEYS))
    table = gpu_lib.DeviceTable(lib, TABLE_CAPACITY, DIM)
    d_keys = cp.asarray(keys)
    slots = cp.empty(keys.size, dtype=cp.int64)
    rows = cp.empty((keys.size, DIM), dtype=cp.float32)
    init = ("random_normal", 1, 0.0, 0.05)
    assert table.find_or_insert(d_keys, 1, slots, None, init) == 0
    query = cp.asarray(rng.permutation(keys))
    find_ms = time_ms(lambda: table.find(query, slots))
    upsert_ms = time_ms(lambda: table.find_or_insert(query, 2, slots, rows, init), iters=5)
    assert int((slots < 0).sum()) == 0
    return {
        "table_keys": int(keys.size),
        "table_capacity": TABLE_CAPACITY,
        "find_ms": find_ms,
        "find_keys_per_s": keys.size / find_ms * 1e3,
        "find_or_insert_ms": upsert_ms,
        "find_or_insert_keys_per_s": keys.size / upsert_ms * 1e3,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    lib = gpu_lib.load()
    kernels = gpu_lib.Kernels(lib)
    samples = BATCH * FEATURES
    ids = samples * IDS_PER_SAMPLE
    cp.random.seed(0)
    row_splits = cp.arange(0, ids + 1, IDS_PER_SAMPLE, dtype=cp.int64)
    inverse = cp.random.randint(0, NUM_UNIQUE, size=ids, dtype=cp.int32)
    weights = cp.random.uniform(0.5, 1.5, size=ids, dtype=cp.float32)
    rows = cp.random.standard_normal((NUM_UNIQUE, DIM), dtype=cp.float32)
    scale = cp.empty(samples, dtype=cp.float32)
    out = cp.empty((samples, DIM), dtype=cp.float32)
    grad_rows = cp.empty_like(rows)
    kernels.sample_scales(row_splits, weights, "mean", scale)

    row_bytes = DIM * 4
    index_bytes = ids * (4 + 4) + samples * (8 + 4)  # inverse, weights; row_splits, scale
    forward_bytes = ids * row_bytes + samples * row_bytes + index_bytes
    backward_bytes = samples * row_bytes + 2 * ids * row_bytes + NUM_UNIQUE * row_bytes
    backward_bytes += index_bytes

    forward_ms = time_ms(
        lambda: kernels.combine_forward(rows, inverse, row_splits, weights, scale, out)
    )
    backward_ms = time_ms(
        lambda: kernels.combine_backward(out, inverse, row_splits, weights, scale, grad_rows)
    )
    copy_gbs = copy_bandwidth()
    results = {
        "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "samples": samples,
        "ids": ids,
        "dim": DIM,
        "num_unique": NUM_UNIQUE,
        "copy_GBps": copy_gbs,
        "forward_ms": forward_ms,
        "forward_GBps": forward_bytes / forward_ms / 1e6,
        "backward_ms": backward_ms,
        "backward_GBps": backward_bytes / backward_ms / 1e6,
    }
    results.update(hash_table_rates(lib))
    results["forward_vs_copy"] = results["forward_GBps"] / copy_gbs
    results["backward_vs_copy"] = results["backward_GBps"] / copy_gbs
    print(f"device            {results['device']}")
    print(f"batch             {BATCH} x {FEATURES} x {IDS_PER_SAMPLE} ids, d = {DIM}")
    print(f"copy (d2d)        {copy_gbs:8.1f} GB/s")
    for name in ("forward", "backward"):
        print(
            f"{name:<17} {results[name + '_GBps']:8.1f} GB/s  {results[name + '_ms']:7.3f} ms  "
            f"{100 * results[name + '_vs_copy']:5.1f}% of copy"
        )
    print(
        f"hash find         {results['find_keys_per_s'] / 1e9:8.2f} G keys/s  "
        f"({results['table_keys']} present keys, {TABLE_CAPACITY} slots)"
    )
    print(
        f"find-or-insert    {results['find_or_insert_keys_per_s'] / 1e9:8.2f} G keys/s  "
        f"(present keys, d = {DIM} rows out)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    assert np.isfinite(float(out[0, 0].get()))


if __name__ == "__main__":
    main()
