"""The key index of a disk tier (kernels/core/disk_index.h) against the exact index it replaces
past 2^15 keys on disk, side by side on the same random keys in one process: RAM per key, and
the time of the calls a tiered table makes of it (fill, probes of stored and absent keys, an
erase with an insert: one read-back and one spill). Builds benchmarks/native/disk_index_bench.cc
with the system C++ compiler (-O2, as the op library's -O3 makes no difference here).

Usage: cd benchmarks && python disk_index_bench.py [--keys 1000000 4000000 16000000]
"""

import argparse
import json
import pathlib
import subprocess
import tempfile

from common import build_native

SOURCES = ["benchmarks/native/disk_index_bench.cc", "kernels/core/disk_index.cc"]
SOURCES += ["kernels/core/open_index.cc", "kernels/core/huge_pages.cc"]


def build(out: pathlib.Path) -> pathlib.Path:
    return build_native("disk_index_bench", SOURCES, out, ["-O2"])


def run(exe: pathlib.Path, keys: int) -> list[dict]:
    out = subprocess.run([str(exe), str(keys)], check=True, capture_output=True, text=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000_000, 4_000_000, 16_000_000])
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(pathlib.Path(tmp))
        for keys in args.keys:
            exact, compact = run(exe, keys)
            results += [exact, compact]
            print(f"{keys:,} keys on disk (random int64):")
            for field, label in [
                ("bytes_per_key", "RAM per key (bytes)"),
                ("fill_ns", "fill, per key (ns)"),
                ("probe_stored_ns", "probe, stored key (ns)"),
                ("probe_absent_ns", "probe, absent key (ns)"),
                ("erase_insert_ns", "erase + insert (ns)"),
            ]:
                ratio = compact[field] / exact[field]
                print(
                    f"  {label:26s} exact {exact[field]:8.1f}  compact {compact[field]:8.1f}"
                    f"  compact/exact {ratio:5.2f}x"
                )
            share = compact["absent_seeming"] / compact["absent"]
            print(
                f"  absent keys the compact index may hold: {compact['absent_seeming']} of "
                f"{compact['absent']:,} ({share:.2e}; each costs one record read)"
            )
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
