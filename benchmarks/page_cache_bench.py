"""The least CPU a disk tier's miss can cost on this machine: moving fixed-size records between the
process and a file in the page cache, by each way there is. A miss of a tiered table reads one
record back and, through a spill, writes one; the tier reads with one pread a record and writes
appended 1 MiB runs. This measures those against the alternatives (io_uring reads, a mapping of
the file, writes in place) and against the same reads of one record over and over (a read less
the finding of its page among the file's), per record, with no table around them: the floor any
change to the tier's file I/O could reach. Builds benchmarks/native/page_cache_bench.cc with the
system C++ compiler.

Usage: cd benchmarks && python page_cache_bench.py [--records 3700000] [--record-bytes 808]
       [--batch 12000] [--reps 5] [--dir DIR] [--json FILE]

The defaults are the tier file of tiered_bench.py prefetch at a tenth of the table (2M rows of
d = 64 with Adam's two slots, 808-byte records, ~3 GB once settled) and about the rows a step
reads back there.
"""

import argparse
import json
import os
import pathlib
import tempfile

from common import native_runs

SOURCES = ["benchmarks/native/page_cache_bench.cc"]
ORDER = ("pread", "pread_cached", "io_uring", "mmap", "pwrite_random", "pwrite_append")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=3_700_000, help="records in the file")
    parser.add_argument("--record-bytes", type=int, default=808)
    parser.add_argument("--batch", type=int, default=12_000, help="records moved a repetition")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the file goes (default: the temp dir)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = pathlib.Path(tmp) / "records.bin"
        run = [path, args.records, args.record_bytes, args.batch, args.reps]
        (results,) = native_runs("page_cache_bench", SOURCES, [run])
    size = args.records * args.record_bytes
    print(
        f"{args.records:,} records of {args.record_bytes} bytes ({size / 1e9:.2f} GB, in the "
        f"page cache), {args.batch:,} moved a repetition at random slots, sorted; medians of "
        f"{args.reps}; load average {os.getloadavg()[0]:.1f}"
    )
    by_name = {r["what"]: r for r in results}
    base = by_name["pread"]["cpu_us_per_record"]
    for name in ORDER:
        r = by_name[name]
        if not r["available"]:
            print(f"  {name:14s} not available here")
            continue
        print(
            f"  {name:14s} {r['us_per_record']:7.3f} us a record, CPU {r['cpu_us_per_record']:7.3f}"
            f" us ({r['cpu_us_per_record'] / base:5.2f}x pread), {r['mismatches']} records wrong"
        )
    if args.json:
        record = {
            "benchmark": "page_cache",
            "records": args.records,
            "record_bytes": args.record_bytes,
            "batch": args.batch,
            "reps": args.reps,
            "load_average": os.getloadavg()[0],
            "results": results,
        }
        pathlib.Path(args.json).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
