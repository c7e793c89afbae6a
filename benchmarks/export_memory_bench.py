"""The RAM that sok.export_saved_model adds while it exports a static table.

Usage: cd benchmarks && python export_memory_bench.py [--rows N] [--dim D] [--updatable]

One process creates a static table of --rows x --dim float32 rows, reads its RSS, resets the
kernel's peak-RSS mark (/proc/self/clear_refs), exports a model that looks the table up, and
prints one JSON line:

table_mib   the table's own bytes.
rss_mib     the process's RSS before the export (the table included).
added_mib   the peak RSS during the export less rss_mib: what exporting added.
seconds     the export's wall time; saved_mib: the SavedModel's bytes on disk.

Linux only (it reads /proc/self/status). docs/benchmarks.md records runs.
"""

import argparse
import json
import pathlib
import tempfile
import time

import tensorflow as tf

import sok_lite as sok

MIB = 2**20


def status(field: str) -> int:
    """A /proc/self/status field in bytes (VmRSS, VmHWM)."""
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--updatable", action="store_true")
    args = parser.parse_args()
    table = sok.Variable(shape=[args.rows, args.dim], initializer="random_uniform", name="big")

    def predict(values, splits):
        ids = tf.RaggedTensor.from_row_splits(values, splits)
        return sok.lookup_sparse(table, ids, combiners="sum")

    spec = [tf.TensorSpec([None], tf.int64)] * 2
    extra = {"updatable": True, "model_id": "bench"} if args.updatable else {}
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "served"
        rss = status("VmRSS")
        pathlib.Path("/proc/self/clear_refs").write_text("5")  # peak RSS := RSS now
        start = time.perf_counter()
        sok.export_saved_model(predict, path, spec, tables=[table], **extra)
        seconds = time.perf_counter() - start
        peak = status("VmHWM")
        saved = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    result = {
        "rows": args.rows,
        "dim": args.dim,
        "updatable": args.updatable,
        "table_mib": round(args.rows * args.dim * 4 / MIB, 1),
        "rss_mib": round(rss / MIB, 1),
        "added_mib": round((peak - rss) / MIB, 1),
        "seconds": round(seconds, 2),
        "saved_mib": round(saved / MIB, 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
