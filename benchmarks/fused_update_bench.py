"""Would a fused backward + optimizer pass pay on the CPU? The op library sums each distinct
row's gradient into a [distinct, dim] buffer (the lookup's backward) and then updates the rows
from it (OptimizerScope's row-wise kernel); FBGEMM's CPU backward instead groups the positions by
row and updates each row as soon as its gradient is summed. Both, on the kernels of
kernels/core, one thread, alternating step by step on copies of one table, 16,384 x 10 Zipf(1.2)
ids, d = 64: time per step and whether the two end bit for bit equal. Builds
benchmarks/native/fused_update_bench.cc with the system C++ compiler at the op library's -O3.

Usage: cd benchmarks && python fused_update_bench.py [--rows 1000000 10000000] [--steps 40]
"""

import argparse
import json
import pathlib

from common import native_runs

SOURCES = ["benchmarks/native/fused_update_bench.cc"]
CORE = ("lookup_combine", "row_sum", "lookup_unique", "optimizer")
SOURCES += [f"kernels/core/{n}.cc" for n in CORE]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    results = []
    runs = [[rows, args.steps] for rows in args.rows]
    for rows, lines in zip(args.rows, native_runs("fused_update_bench", SOURCES, runs)):
        for r in lines:
            results.append(r)
            print(
                f"{rows:>12,} rows  {r['optimizer']:8s} ({r['distinct']:,} distinct rows): "
                f"unfused {r['unfused_ms']:6.2f} ms  fused {r['fused_ms']:6.2f} ms  "
                f"fused / unfused {r['fused_ms'] / r['unfused_ms']:4.2f}x  "
                f"same bits: {r['same_bits']}"
            )
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
