"""Would a static table gain from storing each row beside its optimizer slots? Row-wise Adam over
the rows a DLRM step touches (26 x 4096 Zipf(1.1) ids, d = 16), one thread, on kernels/core: the
static layout (table, m and v as three arrays, as a sok_lite.Variable and its Keras slots are)
against one record per row (row, m, v adjacent, as a hash table stores them), alternating step
by step on the same values, both advised for huge pages; then the rows-updated tracker's write
of the same rows, in order and prefetched ahead. Prints the times and whether both layouts end
bit for bit equal. Builds benchmarks/native/row_layout_bench.cc with the system C++ compiler at
the op library's -O3.

Usage: cd benchmarks && python row_layout_bench.py [--rows 290000 29000000] [--steps 40]
"""

import argparse
import json
import pathlib

from common import memory_setting, native_runs

SOURCES = ["benchmarks/native/row_layout_bench.cc"]
SOURCES += [f"kernels/core/{n}.cc" for n in ("lookup_unique", "optimizer", "huge_pages")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[290_000, 29_000_000])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    print(memory_setting())
    results = []
    runs = [[rows, args.steps] for rows in args.rows]
    for rows, (r,) in zip(args.rows, native_runs("row_layout_bench", SOURCES, runs)):
        results.append(r)
        print(
            f"{rows:>12,} rows ({r['distinct']:,} distinct a step): Adam on three arrays "
            f"{r['arrays_ms']:6.2f} ms, on records {r['records_ms']:6.2f} ms "
            f"(records / arrays {r['records_ms'] / r['arrays_ms']:4.2f}x, "
            f"same bits: {r['same_bits']}); tracker {r['track_ms']:5.2f} ms, "
            f"prefetched {r['track_prefetched_ms']:5.2f} ms"
        )
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
