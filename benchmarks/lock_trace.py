"""Sums a trace of the hash tables' locks (SOK_LITE_LOCK_TRACE=1, kernels/tf/lock_trace.h). Per
table (its resource's address): the time from one lookup to the next (a step), the share of a
step its lock was held, and per holder how often it took the lock, how long it waited for it and
how long it held it.

Usage: SOK_LITE_LOCK_TRACE=1 python tiered_bench.py prefetch ... 2> trace.txt
       python lock_trace.py trace.txt [--last N]

prefetch-read holds no lock: its "held" is how long the read took, beside the lock's holders.
"""

import argparse
import collections
import statistics
import sys

PREFIX = "sok_lite lock: "
UNLOCKED = {"prefetch-read"}


def parse(lines):
    """(table, what, thread, asked, held, done) of each trace line, times in ms."""
    out = []
    for line in lines:
        if not line.startswith(PREFIX):
            continue
        fields = line[len(PREFIX) :].split()
        if len(fields) < 6:
            continue
        *table, what, thread = fields[:-3]
        asked, held, done = (int(v) / 1e3 for v in fields[-3:])
        out.append((" ".join(table), what, int(thread), asked, held, done))
    return out


def summarize(events, last=0):
    """Per table: the median time between its lookups (a step: the cycles that last at most
    twice the median, so that pauses between runs and other models' turns drop out), the median
    share of such a cycle its lock was held, and over those cycles each holder's count and mean
    wait and hold (ms). last > 0: only each table's last `last` lookups (the timed steps of a
    benchmark that warms up first)."""
    by_table = collections.defaultdict(list)
    for e in events:
        by_table[e[0]].append(e)
    result = {}
    for table, rows in by_table.items():
        lookups = sorted(e[4] for e in rows if e[1] == "lookup")[-last - 1 if last else 0 :]
        cycles = list(zip(lookups, lookups[1:]))
        if not cycles:
            continue
        typical = statistics.median(b - a for a, b in cycles)
        cycles = [(a, b) for a, b in cycles if b - a <= 2 * typical]
        holders = collections.defaultdict(lambda: [0, 0.0, 0.0])
        shares = []
        for a, b in cycles:
            busy = 0.0
            for _, what, _, asked, held, done in rows:
                if not a <= held < b:
                    continue
                h = holders[what]
                h[0] += 1
                h[1] += held - asked
                h[2] += done - held
                if what not in UNLOCKED:
                    busy += done - held
            shares.append(busy / (b - a))
        result[table] = {
            "holders": {w: (n, wait / n, hold / n) for w, (n, wait, hold) in holders.items()},
            "busy": statistics.median(shares),
            "step_ms": statistics.median(b - a for a, b in cycles),
            "steps": len(cycles),
        }
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace", help="a file of trace lines (stderr of the traced run); - for stdin")
    p.add_argument("--last", type=int, default=0, help="only each table's last N lookups")
    args = p.parse_args()
    if args.trace == "-":
        events = parse(sys.stdin)
    else:
        with open(args.trace) as lines:
            events = parse(lines)
    for table, s in summarize(events, args.last).items():
        print(
            f"table {table}: {s['steps']} steps of {s['step_ms']:.1f} ms (lookup to lookup, "
            f"medians), its lock held {s['busy']:.0%} of a step"
        )
        for what, (n, wait, hold) in sorted(s["holders"].items()):
            print(f"  {what:15s} {n:6d}x  waits {wait:6.2f} ms  holds {hold:6.2f} ms")


if __name__ == "__main__":
    main()
