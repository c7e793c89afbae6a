"""One model of e2e_bench.py training under model.fit, for a sampling profiler: builds it, trains
--warm steps (tracing, optimizer slots), writes its process id to --ready, then trains --steps
more and prints the mean step time. Attach the profiler once --ready exists, so that building
the tables (filling hundreds of MB of initial rows and slots) stays out of the profile:

    cd benchmarks
    ../.venv/bin/python e2e_profile_target.py --kind sok_lite_static --ready /tmp/ready &
    while [ ! -f /tmp/ready ]; do sleep 1; done
    perf record -g -p "$(cat /tmp/ready)" -- sleep 20
"""

import argparse
import os
import pathlib
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import memory_setting  # noqa: E402
from e2e_models import MODELS, batches, build_model, cardinalities, dataset  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kind", choices=MODELS, default="sok_lite_static")
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--warm", type=int, default=5)
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--ready", required=True, help="file to write the process id to when warm")
    args = p.parse_args()
    print(memory_setting(), flush=True)
    cards = cardinalities(26, args.scale)
    data = dataset(batches(cards, 4096, 100, 0))
    model = build_model(args.kind, cards)
    model.fit(data, steps_per_epoch=args.warm, epochs=1, verbose=0)
    pathlib.Path(args.ready).write_text(str(os.getpid()))
    start = time.perf_counter()
    model.fit(data, steps_per_epoch=args.steps, epochs=1, verbose=0)
    ms = (time.perf_counter() - start) / args.steps * 1e3
    print(f"{args.kind}, scale {args.scale}: {ms:.1f} ms a step over {args.steps} steps")


if __name__ == "__main__":
    main()
