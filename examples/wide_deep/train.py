"""Trains the wide & deep example with Keras fit, on one process or many.

    python examples/wide_deep/train.py
    horovodrun -np 2 -H localhost:2 --gloo python examples/wide_deep/train.py

Prints, per epoch, the training loss, the samples per second and the rows the two hash tables
store; at the end, the AUC of the model and of the planted model ("oracle") on held-out samples.
Inside an epoch: Keras' progress bar on a terminal, else a line every --log-every steps.
--history-json writes the metrics as JSON.
Under Horovod every rank trains on its share of each global batch and the tables are spread over
the ranks; the Horovod, progress and history helpers are those of the DLRM example
(examples/dlrm/parallel.py, progress.py, history.py).
"""

import argparse
import functools
import os
import pathlib
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# After this directory, so that data.py and model.py are this example's.
sys.path.append(str(pathlib.Path(__file__).resolve().parent.parent / "dlrm"))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from data import NUM_DENSE, WIDE_IDS_PER_SAMPLE, ClickLogs  # noqa: E402
from history import add_history_json_flag, write_history  # noqa: E402
from metrics import auc  # noqa: E402
from model import WideAndDeep  # noqa: E402
from parallel import (  # noqa: E402
    DenseAllReduceOptimizer,
    allgather,
    broadcast_dense_weights,
    init_horovod,
    mean_over_ranks,
    rank_stream,
)
from progress import add_log_every_flag, fit_progress, steps_between_lines  # noqa: E402

import sok_lite as sok  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--global-batch", type=int, default=4096, help="samples per step, summed")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--steps-per-epoch", type=int, default=200)
    parser.add_argument("--wide-features", type=int, default=20_000)
    parser.add_argument("--users", type=int, default=1_000_000, help="distinct hashed user keys")
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--categories", type=int, default=50)
    parser.add_argument(
        "--device-categories",
        type=int,
        default=100_000,
        help="the id range of the device feature (3 of its values occur)",
    )
    parser.add_argument("--embedding-dim", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--eval-samples", type=int, default=32_768)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--table-dtype",
        choices=["float32", "bfloat16", "float16"],
        default="float32",
        help="storage dtype of the embedding tables (16 bits: half the memory; lookups and "
        "optimizer math stay float32)",
    )
    add_log_every_flag(parser)
    add_history_json_flag(parser)
    args = parser.parse_args(argv)
    args.log_every = steps_between_lines(args.log_every, args.steps_per_epoch)
    return args


def train_dataset(logs: ClickLogs, global_batch: int, rank: int, num_ranks: int):
    """This rank's share of the global batch of step 0, 1, 2, ... (an endless stream)."""
    local = global_batch // num_ranks
    one_id = tf.TensorSpec([local], tf.int64)
    signature = (
        {
            "wide_ids": tf.TensorSpec([local, WIDE_IDS_PER_SAMPLE], tf.int64),
            "wide_values": tf.TensorSpec([local, WIDE_IDS_PER_SAMPLE], tf.float32),
            "user": one_id,
            "item": one_id,
            "category": one_id,
            "device": one_id,
            "dense": tf.TensorSpec([local, NUM_DENSE], tf.float32),
        },
        tf.TensorSpec([local, 1], tf.float32),
    )
    return rank_stream(lambda step: logs.batch(step, global_batch, rank, num_ranks), signature)


class Progress(keras.callbacks.Callback):
    """Per epoch: the loss (averaged over ranks), samples/s and the rows of the hash tables."""

    def __init__(self, samples_per_epoch: int, hvd, verbose: bool):
        super().__init__()
        self.samples_per_epoch = samples_per_epoch
        self.hvd = hvd
        self.verbose = verbose
        self.history: list[dict] = []

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self.start
        result = {
            "epoch": epoch + 1,
            "loss": float(mean_over_ranks([logs["loss"]], self.hvd)[0]),
            "seconds": seconds,
            "samples_per_s": self.samples_per_epoch / seconds,
            # size() counts the rows of every rank (every rank must call it).
            "user_rows": int(self.model.users.size()),
            "device_rows": int(self.model.devices.size()),
        }
        self.history.append(result)
        if self.verbose:
            print(
                f"epoch {result['epoch']:3d}  loss {result['loss']:.4f}  "
                f"samples/s {result['samples_per_s']:,.0f}  "
                f"user rows {result['user_rows']:,}  device rows {result['device_rows']}",
                flush=True,
            )


def evaluate(model, logs: ClickLogs, samples: int, rank: int, num_ranks: int, hvd):
    """(model AUC, oracle AUC) on the held-out samples: each rank scores its share (the lookup
    is collective: every rank runs the same number of predict steps), the scores are gathered."""
    held_out = logs.held_out(samples, rank, num_ranks)
    logits = model.predict(held_out.features, batch_size=4096, verbose=0)[:, 0]
    labels = allgather(held_out.labels[:, 0], hvd)
    return auc(labels, allgather(logits, hvd)), auc(labels, allgather(held_out.probabilities, hvd))


def main(argv=None) -> dict:
    """Trains and evaluates; returns the per-epoch history and the final metrics."""
    wall_start = time.perf_counter()
    args = parse_args(argv)
    hvd = init_horovod()
    sok.init()  # Horovod when hvd.init() has run, else one process
    rank, num_ranks = sok.rank(), sok.num_ranks()
    if args.global_batch % num_ranks or args.eval_samples % num_ranks:
        raise ValueError(f"--global-batch and --eval-samples must divide by {num_ranks} ranks")
    keras.utils.set_random_seed(args.seed)

    logs = ClickLogs(
        wide_features=args.wide_features,
        users=args.users,
        items=args.items,
        categories=args.categories,
        device_categories=args.device_categories,
        seed=args.seed,
    )
    model = WideAndDeep(
        wide_features=args.wide_features,
        items=args.items,
        categories=args.categories,
        device_categories=args.device_categories,
        embedding_dim=args.embedding_dim,
        dense_features=NUM_DENSE,
        table_dtype=args.table_dtype,
    )
    broadcast_dense_weights(model, hvd)
    model.compile(
        optimizer=DenseAllReduceOptimizer(keras.optimizers.Adam(args.learning_rate), hvd),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    if rank == 0:
        print(
            f"{num_ranks} rank(s), global batch {args.global_batch}, wide table "
            f"{args.wide_features:,} x 1, {args.users:,} users as raw 64-bit keys, "
            f"device ids from a range of {args.device_categories:,}, {args.table_dtype} tables",
            flush=True,
        )

    progress = Progress(args.steps_per_epoch * args.global_batch, hvd, verbose=rank == 0)
    fit_verbose, progress_callbacks, step_log = fit_progress(
        args.log_every,
        args.global_batch,
        rank,
        num_ranks,
        functools.partial(mean_over_ranks, hvd=hvd),
    )
    model.fit(
        train_dataset(logs, args.global_batch, rank, num_ranks),
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        callbacks=[*progress_callbacks, progress],
        shuffle=False,  # the stream is already random; fit would warn that it cannot shuffle
        verbose=fit_verbose,
    )
    # Read before evaluating: lookups of held-out keys create rows too.
    user_rows, device_rows = int(model.users.size()), int(model.devices.size())
    model_auc, oracle_auc = evaluate(model, logs, args.eval_samples, rank, num_ranks, hvd)

    # The first epoch includes tracing; later ones show the steady state.
    steady = [h["seconds"] for h in progress.history[1:]] or [progress.history[0]["seconds"]]
    samples_per_s = args.steps_per_epoch * args.global_batch * len(steady) / sum(steady)
    wall_s = time.perf_counter() - wall_start
    if rank == 0:
        print(
            f"final AUC {model_auc:.4f}  oracle AUC {oracle_auc:.4f}  "
            f"gap {oracle_auc - model_auc:.4f}  samples/s {samples_per_s:,.0f}",
            flush=True,
        )
        print(
            f"rows stored: user {user_rows:,} (raw 64-bit keys), device {device_rows} "
            f"(of {args.device_categories:,} possible ids)  wall time {wall_s:.0f} s",
            flush=True,
        )
        if args.history_json:
            epochs = [dict(h) for h in progress.history]
            epochs[-1].update(auc=model_auc, oracle_auc=oracle_auc)  # evaluated once, at the end
            write_history(
                args.history_json, "wide_deep", args, argv, num_ranks, epochs, step_log.records
            )
    return {
        "history": progress.history,
        "auc": model_auc,
        "oracle_auc": oracle_auc,
        "samples_per_s": samples_per_s,
        "user_rows": user_rows,
        "device_rows": device_rows,
    }


if __name__ == "__main__":
    main()
