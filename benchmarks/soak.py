"""Soak: a long training run of the DLRM example at small size, checking that nothing drifts.

    python benchmarks/soak.py                      # 20,000 steps, one process
    horovodrun -np 2 -H localhost:2 --gloo python benchmarks/soak.py

The model is examples/dlrm (26 sharded tables, dense MLPs, Adam through sok_lite's optimizer
wrapper) plus one sok_lite.DynamicVariable: a "user" feature whose keys are spread over a 2^40
key space, so its table grows as new keys arrive. After a warm-up, it checks:

- RSS (VmRSS of /proc/self/status, every rank) at the end vs after the warm-up: < 5% growth;
- the dynamic table holds exactly the keys looked up, and RSS grows no more than the rows added
  after the warm-up explain (a per-step leak would show as growth with no new rows);
- the median step time of the last `--window` steps vs the first `--window` after the warm-up:
  within 10%.

Rank 0 prints PASS/FAIL per target and, as its last line, the figures as one JSON object.
"""

import argparse
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples" / "dlrm"))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from data import CriteoLike, vocabulary_sizes  # noqa: E402
from model import build_dlrm  # noqa: E402
from parallel import DenseAllReduceOptimizer, broadcast_dense_weights, init_horovod  # noqa: E402

import sok_lite as sok  # noqa: E402

RSS_GROWTH_LIMIT = 0.05
STEP_TIME_DRIFT_LIMIT = 0.10
USER_KEY_MULTIPLIER = 0x9E3779B97F  # odd: key -> key * M mod 2^40 is one-to-one
KEY_SPACE = 1 << 40


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--warmup", type=int, default=1000, help="steps before the baseline")
    parser.add_argument("--window", type=int, default=1000, help="steps in each timing window")
    parser.add_argument("--global-batch", type=int, default=512)
    parser.add_argument("--max-vocabulary", type=int, default=10_000)
    parser.add_argument("--embedding-dim", type=int, default=16)
    parser.add_argument("--users", type=int, default=50_000, help="distinct user keys")
    parser.add_argument("--rss-every", type=int, default=1000, help="steps between RSS samples")
    args = parser.parse_args(argv)
    if args.steps < args.warmup + 2 * args.window:
        parser.error("--steps must cover the warm-up and two timing windows")
    return args


def rss_bytes() -> int:
    """This process's resident set size, from /proc/self/status."""
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def user_keys(step: int, global_batch: int, users: int) -> np.ndarray:
    """[global_batch] user keys of a step: Zipf over `users` ids, scattered over 2^40 keys.

    Drawn from the step alone, so every rank sees the same global batch and takes its share.
    """
    ids = (np.random.default_rng([7, step]).zipf(1.05, global_batch) - 1) % users
    return (ids.astype(np.uint64) * np.uint64(USER_KEY_MULTIPLIER) % np.uint64(KEY_SPACE)).astype(
        np.int64
    )


def row_bytes_bound(dim: int) -> int:
    """Generous bytes per dynamic row: value + Adam's two slots, metadata, a doubled index."""
    return 2 * (3 * dim * 4 + 24 + 2 * 16 * 4 // 3)


class SoakModel:
    """The DLRM example plus a dynamic "user" table whose vector feeds the logit."""

    def __init__(self, args, hvd):
        vocab = vocabulary_sizes(args.max_vocabulary)
        self.dlrm = build_dlrm(vocab, embedding_dim=args.embedding_dim)
        self.users = sok.DynamicVariable(args.embedding_dim, name="users")
        self.user_head = tf.Variable(tf.ones([args.embedding_dim]) * 0.01, name="user_head")
        broadcast_dense_weights(self.dlrm, hvd)
        self.variables = [*self.dlrm.trainable_variables, self.users, self.user_head]
        self.optimizer = DenseAllReduceOptimizer(keras.optimizers.Adam(1e-3), hvd)
        self.num_ranks = sok.num_ranks()
        self.step = tf.function(self._step)

    def _step(self, dense, categorical, users, labels):
        with tf.GradientTape() as tape:
            logits = self.dlrm({"dense": dense, "categorical": categorical}, training=True)
            (user_vec,) = sok.lookup_sparse([self.users], [tf.RaggedTensor.from_tensor(users)])
            logits += tf.reduce_sum(user_vec * self.user_head, axis=1, keepdims=True)
            loss = keras.losses.binary_crossentropy(labels, logits, from_logits=True)
            # This rank's part of the global mean (the optimizer sums dense gradients).
            loss = tf.reduce_mean(loss) / self.num_ranks
        grads = tape.gradient(loss, self.variables)
        self.optimizer.apply_gradients(zip(grads, self.variables))
        return loss


def gather(value, hvd):
    """`value` of every rank, in rank order (a list of one on a single process)."""
    if hvd is None or hvd.size() == 1:
        return [value]
    return hvd.allgather_object(value)


def train(args, hvd) -> dict:
    rank, num_ranks = sok.rank(), sok.num_ranks()
    data = CriteoLike(vocabulary_sizes(args.max_vocabulary), seed=0)
    model = SoakModel(args, hvd)
    lo = rank * args.global_batch // num_ranks
    hi = (rank + 1) * args.global_batch // num_ranks
    seen_keys: set[int] = set()
    # Preallocated: a growing list of step times would itself add ~32 bytes of RSS per step.
    step_ms, step_cpu_ms, rss_samples = np.zeros(args.steps), np.zeros(args.steps), []
    for step in range(args.steps):
        batch = data.batch(step, args.global_batch, rank, num_ranks)
        keys = user_keys(step, args.global_batch, args.users)
        seen_keys.update(keys.tolist())
        inputs = (
            batch.features["dense"],
            batch.features["categorical"],
            keys[lo:hi, np.newaxis],
            batch.labels,
        )
        start, start_cpu = time.perf_counter(), time.process_time()
        model.step(*inputs).numpy()  # fetching the loss waits for the step
        step_ms[step] = (time.perf_counter() - start) * 1e3
        # CPU time of all this process's threads: less sensitive than wall time to other jobs.
        step_cpu_ms[step] = (time.process_time() - start_cpu) * 1e3
        if step + 1 == args.warmup:
            rss_warm = rss_bytes()
            rows_warm = int(model.users.size())  # collective: every rank calls it
            keys_warm = len(seen_keys)
        if (step + 1) % args.rss_every == 0 or step + 1 == args.steps:
            rss_samples.append((step + 1, rss_bytes()))
    rss_end = rss_bytes()
    rows_end = int(model.users.size())
    first = step_ms[args.warmup : args.warmup + args.window]
    last = step_ms[-args.window :]
    first_cpu = step_cpu_ms[args.warmup : args.warmup + args.window]
    last_cpu = step_cpu_ms[-args.window :]
    return {
        "rss_warm": rss_warm,
        "rss_end": rss_end,
        "rss_samples": rss_samples,
        "rows_warm": rows_warm,
        "rows_end": rows_end,
        "keys_warm": keys_warm,
        "keys_end": len(seen_keys),
        "first_ms": float(np.median(first)),
        "last_ms": float(np.median(last)),
        "first_mean_ms": float(np.mean(first)),
        "last_mean_ms": float(np.mean(last)),
        "first_cpu_ms": float(np.median(first_cpu)),
        "last_cpu_ms": float(np.median(last_cpu)),
    }


def evaluate(args, per_rank: list[dict]) -> dict:
    """The targets over all ranks: each must hold on every rank."""
    mib = 1 / 2**20
    dim = args.embedding_dim
    ranks = []
    for r in per_rank:
        growth = r["rss_end"] - r["rss_warm"]
        rows_added = r["rows_end"] - r["rows_warm"]
        # Rows are counted over all ranks: each rank's share is about 1 / N of them.
        allowed = rows_added / len(per_rank) * row_bytes_bound(dim) + 0.01 * r["rss_warm"]
        ranks.append(
            {
                "rss_warm_mib": r["rss_warm"] * mib,
                "rss_end_mib": r["rss_end"] * mib,
                "rss_growth": growth / r["rss_warm"],
                "rss_growth_mib": growth * mib,
                "dynamic_growth_allowed_mib": allowed * mib,
                "rss_samples_mib": [(s, b * mib) for s, b in r["rss_samples"]],
                "first_window_ms": r["first_ms"],
                "last_window_ms": r["last_ms"],
                "first_window_mean_ms": r["first_mean_ms"],
                "last_window_mean_ms": r["last_mean_ms"],
                "first_window_cpu_ms": r["first_cpu_ms"],
                "last_window_cpu_ms": r["last_cpu_ms"],
            }
        )
    r0 = per_rank[0]
    payload = 3 * dim * 4  # value + Adam's m and v, float32
    drift = [abs(r["last_window_ms"] / r["first_window_ms"] - 1) for r in ranks]
    targets = {
        "rss_growth_below_5pct": all(r["rss_growth"] < RSS_GROWTH_LIMIT for r in ranks),
        "dynamic_rows_equal_keys_seen": r0["rows_end"] == r0["keys_end"],
        "dynamic_memory_follows_rows": all(
            r["rss_growth_mib"] <= r["dynamic_growth_allowed_mib"] for r in ranks
        ),
        "step_time_within_10pct": max(drift) < STEP_TIME_DRIFT_LIMIT,
    }
    return {
        "steps": args.steps,
        "warmup": args.warmup,
        "window": args.window,
        "ranks": len(per_rank),
        "dynamic_rows_warm": r0["rows_warm"],
        "dynamic_rows_end": r0["rows_end"],
        "dynamic_keys_seen_warm": r0["keys_warm"],
        "dynamic_keys_seen_end": r0["keys_end"],
        "dynamic_payload_mib": r0["rows_end"] * payload * mib,
        "step_time_drift": max(drift),
        "per_rank": ranks,
        "targets": targets,
        "pass": all(targets.values()),
    }


def print_report(result: dict) -> None:
    print(f"soak: {result['steps']} steps on {result['ranks']} rank(s), warm-up {result['warmup']}")
    for r, figures in enumerate(result["per_rank"]):
        print(
            f"  rank {r}: RSS {figures['rss_warm_mib']:.1f} -> {figures['rss_end_mib']:.1f} MiB "
            f"({100 * figures['rss_growth']:+.2f}%, allowed for new dynamic rows "
            f"{figures['dynamic_growth_allowed_mib']:.1f} MiB); step median "
            f"{figures['first_window_ms']:.2f} -> {figures['last_window_ms']:.2f} ms "
            f"(CPU {figures['first_window_cpu_ms']:.2f} -> {figures['last_window_cpu_ms']:.2f} ms)"
        )
    print(
        f"  dynamic table: {result['dynamic_rows_warm']:,} -> {result['dynamic_rows_end']:,} "
        f"rows for {result['dynamic_keys_seen_end']:,} keys seen "
        f"({result['dynamic_payload_mib']:.1f} MiB of values and slots)"
    )
    for name, ok in result["targets"].items():
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    print(json.dumps(result), flush=True)


def main(argv=None) -> dict:
    args = parse_args(argv)
    hvd = init_horovod()
    sok.init()  # Horovod when hvd.init() has run, else one process
    if args.global_batch % sok.num_ranks():
        raise ValueError(f"--global-batch must divide by {sok.num_ranks()} ranks")
    keras.utils.set_random_seed(0)
    result = evaluate(args, gather(train(args, hvd), hvd))
    if sok.rank() == 0:
        print_report(result)
    return result


if __name__ == "__main__":
    main()
