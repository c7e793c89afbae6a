"""Achieved bandwidth of the combine kernels against the device's own copy bandwidth.

Batch: 16,384 samples x 26 features x 10 ids (each feature a separate ragged sample, as the
fused lookup sees it), d = 128, float32, weighted mean, ids spread uniformly over the unique
rows. Bytes counted: forward reads one table row per id plus the index arrays and writes one
output row per sample; backward reads grad_out once per sample and does one read-modify-write
of a row per id (counted twice), plus zeroing grad_rows. Copy bandwidth counts read + write.

Hash table: 2^24 distinct random int64 keys inserted into 2^25 slots (load 0.5), then a batch
of 2^24 present keys (shuffled) is found: keys per second of the find alone (slot indices out),
and of find-or-insert on the same present keys (slots and d = 128 rows out).

Optimizer: Adam on 1,000,000 distinct random rows of a 4,000,000 x 128 table (GB/s counting the
value, m and v read and written and the gradient read). Unique ids: the forward batch's ids drawn
Zipf(1.2), ids per second.

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


def optimizer_and_unique_rates(kernels):
    """Adam on 1,000,000 distinct random rows of a 4,000,000 x 128 table (value, m and v each
    read and written once, the gradient read: GB/s), and unique ids of the combine batch's
    4,259,840 Zipf(1.2) ids (ids/s, the distinct count's copy to the host included)."""
    rng = np.random.default_rng(3)
    table_rows, touched = 4_000_000, 1_000_000
    var = cp.random.standard_normal((table_rows, DIM), dtype=cp.float32)
    m, v = cp.zeros_like(var), cp.zeros_like(var)
    rows = cp.asarray(rng.choice(table_rows, touched, replace=False).astype(np.int64))
    grads = cp.random.standard_normal((touched, DIM), dtype=cp.float32)
    params = [0.9, 0.999, 1e-7, 1.0]
    adam_ms = time_ms(
        lambda: kernels.apply_rows("adam", 1e-3, 0.0, params, rows, grads, var, [m, v])
    )
    adam_bytes = touched * DIM * 4 * 7 + touched * 8
    ids = cp.asarray((rng.zipf(1.2, BATCH * FEATURES * IDS_PER_SAMPLE) - 1).astype(np.int64))
    unique = cp.empty_like(ids)
    inverse = cp.empty(ids.size, dtype=cp.int32)
    num_unique = kernels.unique_ids(ids, unique, inverse)
    unique_ms = time_ms(lambda: kernels.unique_ids(ids, unique, inverse), iters=10)
    return {
        "adam_rows": touched,
        "adam_ms": adam_ms,
        "adam_GBps": adam_bytes / adam_ms / 1e6,
        "unique_ids": int(ids.size),
        "unique_distinct": num_unique,
        "unique_ms": unique_ms,
        "unique_ids_per_s": ids.size / unique_ms * 1e3,
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
    results.update(optimizer_and_unique_rates(kernels))
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
    print(
        f"adam (row-wise)   {results['adam_GBps']:8.1f} GB/s  {results['adam_ms']:7.3f} ms  "
        f"{100 * results['adam_GBps'] / copy_gbs:5.1f}% of copy  ({results['adam_rows']:,} rows)"
    )
    print(
        f"unique ids        {results['unique_ids_per_s'] / 1e9:8.2f} G ids/s   "
        f"({results['unique_ids']:,} Zipf ids, {results['unique_distinct']:,} distinct)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    assert np.isfinite(float(out[0, 0].get()))


if __name__ == "__main__":
    main()
