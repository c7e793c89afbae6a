"""Online learning: bytes per delta against a full export, time to apply a delta, freshness,
and the RAM a served hash table takes per key.

Usage: cd benchmarks && python online_bench.py [--rows N] [--dim D] [--steps S] [--batch B]

A static table and a hash table of --rows rows each (d = --dim) are trained for a few steps,
exported with updatable=True, then trained --steps more steps of --batch Zipf(1.1) ids per
table before a delta is written. Printed:

bytes    the delta's bytes on disk against the SavedModel's (both tables whole).
write    seconds to write the delta (DeltaWriter.write, one process).
apply    seconds to read, check and apply it to the loaded model (delta_updater.apply_delta),
         and the same per million rows; also a snapshot's (every row of both tables). The
         model is warmed up first (delta_updater.warm_up, as DeltaUpdater does once per loaded
         model: TensorFlow prepares the apply signature's function on its first call);
         warm_up_seconds is that one-time cost.
fresh    seconds from the start of the write to the applied model (write + apply): the
         staleness a server has beyond the writer's period.
serve    requests per second (batches of 512 samples x 2 ids per table) from 1 and from 2
         threads, the updatable export against the plain one: an updatable model runs its
         requests one at a time (they hold the update mutex).
ram      bytes per key of the served hash table (TF's MutableHashTable holding d values
         packed in int32 words): RSS growth of a fresh process inserting --rows keys, over
         --rows, next to the row's own bytes.

Each figure prints with the settings that produced it; docs/benchmarks.md records them.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RAM_PROBE = """
import sys, tensorflow as tf
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS"))
rows, dim = int(sys.argv[1]), int(sys.argv[2])
words = dim  # float32 rows: one int32 word per value, then the "stored" word
table = tf.lookup.experimental.MutableHashTable(
    tf.int64, tf.int32, tf.zeros([words + 1], tf.int32)
)
before = rss()
for start in range(0, rows, 100_000):
    n = min(100_000, rows - start)
    keys = tf.range(start, start + n, dtype=tf.int64) * 7919
    table.insert(keys, tf.ones([n, words + 1], tf.int32))
print((rss() - before) / rows)
"""


def _dir_bytes(path: pathlib.Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _ram_per_key(rows: int, dim: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", RAM_PROBE, str(rows), str(dim)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=4096)
    args = parser.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf

    import sok_lite as sok
    from sok_lite.io import delta_updater

    rows, dim = args.rows, args.dim
    users = sok.Variable(shape=[rows, dim], initializer="random_uniform", name="users")
    clicks = sok.DynamicVariable(dim, initializer="random_normal", name="clicks")
    tables = [users, clicks]
    clicks.assign(tf.range(rows, dtype=tf.int64), tf.random.normal([rows, dim]), step=0)
    opt = keras.optimizers.Adam(0.01)
    rng = np.random.default_rng(0)

    def step() -> None:
        ids = [
            tf.constant(np.minimum(rng.zipf(1.1, args.batch), rows) - 1, tf.int64)[:, None]
            for _ in tables
        ]
        with tf.GradientTape() as tape:
            outs = sok.lookup_sparse(tables, [tf.RaggedTensor.from_tensor(i) for i in ids])
            loss = tf.add_n([tf.reduce_sum(o * o) for o in outs])
        grads = tape.gradient(loss, tables)
        with sok.OptimizerScope(tables):
            opt.apply_gradients(zip(grads, tables))

    def predict(u_values, u_splits, c_values, c_splits):
        ids = [
            tf.RaggedTensor.from_row_splits(u_values, u_splits),
            tf.RaggedTensor.from_row_splits(c_values, c_splits),
        ]
        u, c = sok.lookup_sparse(tables, ids)
        return tf.reduce_sum(u * c, axis=1)

    step()
    root = pathlib.Path(tempfile.mkdtemp())
    spec = [tf.TensorSpec([None], tf.int64)] * 4
    sok.export_saved_model(predict, root / "served", spec, tables, updatable=True, model_id="b")
    writer = sok.DeltaWriter(root / "deltas", tables, opt, model_id="b")
    for _ in range(args.steps):
        step()
    model = tf.saved_model.load(str(root / "served"))
    warm_start = time.perf_counter()
    delta_updater.warm_up(model)  # as DeltaUpdater does once per loaded model
    warm_up_seconds = time.perf_counter() - warm_start

    start = time.perf_counter()
    delta_path = writer.write()
    written = time.perf_counter()
    delta = delta_updater.read_delta(delta_path)
    delta_updater.apply_delta(model, delta)
    applied = time.perf_counter()
    changed = sum(len(t.keys) for t in delta.tables)

    snap_path = writer.write(snapshot=True)
    snap_start = time.perf_counter()
    delta_updater.apply_delta(model, snap_path)
    snap_seconds = time.perf_counter() - snap_start
    snap_rows = 2 * rows

    sok.export_saved_model(predict, root / "plain", spec, tables)
    plain = tf.saved_model.load(str(root / "plain"))
    query = [tf.constant(np.arange(1024) % rows, tf.int64), tf.range(0, 1025, 2, tf.int64)] * 2

    def rate(loaded, threads: int, requests: int = 200) -> float:
        serve = loaded.signatures["serving_default"]
        names = ["u_values", "u_splits", "c_values", "c_splits"]
        serve(**dict(zip(names, query)))  # warm up

        def run() -> None:
            for _ in range(requests // threads):
                serve(**dict(zip(names, query)))

        workers = [threading.Thread(target=run) for _ in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return requests / (time.perf_counter() - start)

    serving = {
        f"{kind}_{threads}_threads": rate(loaded, threads)
        for kind, loaded in (("updatable", model), ("plain", plain))
        for threads in (1, 2)
    }

    settings = vars(args)
    results = {
        "settings": settings,
        "export_bytes": _dir_bytes(root / "served"),
        "delta_bytes": _dir_bytes(delta_path),
        "delta_rows": changed,
        "write_seconds": written - start,
        "apply_seconds": applied - written,
        "apply_seconds_per_million_rows": (applied - written) / changed * 1e6,
        "warm_up_seconds": warm_up_seconds,
        "snapshot_bytes": _dir_bytes(snap_path),
        "snapshot_apply_seconds": snap_seconds,
        "snapshot_apply_seconds_per_million_rows": snap_seconds / snap_rows * 1e6,
        "freshness_seconds": applied - start,
        "requests_per_second": serving,
        "served_hash_ram_bytes_per_key": _ram_per_key(rows, dim),
        "row_bytes": 4 * dim,
    }
    results["delta_over_export"] = results["delta_bytes"] / results["export_bytes"]
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
