"""Trains the DLRM example with Keras fit on synthetic Criteo-like data, on one process or many.

    python examples/dlrm/train.py
    horovodrun -np 2 -H localhost:2 --gloo python examples/dlrm/train.py

Prints, per epoch, the training loss, the AUC of the model and of the planted model ("oracle")
on held-out samples, and the training throughput; inside an epoch, Keras' progress bar on a
terminal, else a line every --log-every steps (progress.py). --history-json writes the metrics
as JSON (history.py). Under Horovod every rank trains on its share of each global batch; the
26 tables are sharded over the ranks.
"""

import argparse
import functools
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from data import NUM_CATEGORICAL, NUM_DENSE, CriteoLike, vocabulary_sizes  # noqa: E402
from history import add_history_json_flag, write_history  # noqa: E402
from metrics import auc  # noqa: E402
from model import build_dlrm  # noqa: E402
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
    parser.add_argument("--steps-per-epoch", type=int, default=50)
    parser.add_argument(
        "--max-vocabulary",
        type=int,
        default=100_000,
        help="rows of the largest of the 26 tables (the smallest has 10); up to 10**7",
    )
    parser.add_argument("--zipf", type=float, default=1.1, help="exponent of the id distribution")
    parser.add_argument("--embedding-dim", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=0.003)
    parser.add_argument("--eval-samples", type=int, default=65_536)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--mixed-precision",
        choices=["none", "mixed_bfloat16", "mixed_float16"],
        default="none",
        help="Keras dtype policy: the layers compute in 16 bits, the tables stay float32; "
        "mixed_float16 adds dynamic loss scaling",
    )
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


def train_dataset(data: CriteoLike, global_batch: int, rank: int, num_ranks: int):
    """This rank's share of the global batch of step 0, 1, 2, ... (an endless stream)."""
    local = global_batch // num_ranks
    signature = (
        {
            "dense": tf.TensorSpec([local, NUM_DENSE], tf.float32),
            "categorical": tf.TensorSpec([local, NUM_CATEGORICAL], tf.int64),
        },
        tf.TensorSpec([local, 1], tf.float32),
    )
    return rank_stream(lambda step: data.batch(step, global_batch, rank, num_ranks), signature)


class Progress(keras.callbacks.Callback):
    """Records each step's loss and, per epoch, prints loss, AUC, oracle AUC and samples/s."""

    def __init__(self, evaluate, samples_per_epoch: int, hvd, verbose: bool):
        super().__init__()
        self.evaluate = evaluate
        self.samples_per_epoch = samples_per_epoch
        self.hvd = hvd
        self.verbose = verbose
        self.step_losses: list[float] = []  # this rank's
        self.epoch_seconds: list[float] = []
        self.history: list[dict] = []

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()
        self.running_mean = []

    def on_train_batch_end(self, batch, logs=None):
        # fit reports the running mean over the epoch: recover each step's own loss from it.
        k = len(self.running_mean) + 1
        mean = float(logs["loss"])
        previous = self.running_mean[-1] if self.running_mean else 0.0
        self.step_losses.append(k * mean - (k - 1) * previous)
        self.running_mean.append(mean)

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self.start  # training only: evaluation comes after
        self.epoch_seconds.append(seconds)
        loss = float(mean_over_ranks([logs["loss"]], self.hvd)[0])
        model_auc, oracle_auc = self.evaluate()
        result = {
            "epoch": epoch + 1,
            "loss": loss,
            "auc": model_auc,
            "oracle_auc": oracle_auc,
            "samples_per_s": self.samples_per_epoch / seconds,
        }
        self.history.append(result)
        if self.verbose:
            print(
                f"epoch {epoch + 1:3d}  loss {loss:.4f}  AUC {model_auc:.4f}  "
                f"oracle AUC {oracle_auc:.4f}  samples/s {result['samples_per_s']:,.0f}",
                flush=True,
            )


def make_evaluator(model, data: CriteoLike, eval_samples: int, rank: int, num_ranks: int, hvd):
    """A function giving (model AUC, oracle AUC) on the held-out samples, over all ranks.

    Each rank scores its share (the lookup is collective: every rank runs the same number of
    predict steps); the scores are gathered so that every rank computes the AUCs of the whole.
    """
    share = eval_samples // num_ranks
    held_out = data.samples(np.arange(rank * share, (rank + 1) * share), "eval")
    labels = allgather(held_out.labels[:, 0], hvd)
    oracle_auc = auc(labels, allgather(held_out.probabilities, hvd))

    def evaluate():
        logits = model.predict(held_out.features, batch_size=4096, verbose=0)[:, 0]
        return auc(labels, allgather(logits, hvd)), oracle_auc

    return evaluate


def main(argv=None) -> dict:
    """Trains and evaluates; returns the global per-step losses and the final metrics."""
    args = parse_args(argv)
    hvd = init_horovod()
    sok.init()  # Horovod when hvd.init() has run, else one process
    rank, num_ranks = sok.rank(), sok.num_ranks()
    if args.global_batch % num_ranks or args.eval_samples % num_ranks:
        raise ValueError(f"--global-batch and --eval-samples must divide by {num_ranks} ranks")
    keras.utils.set_random_seed(args.seed)
    if args.mixed_precision != "none":
        keras.mixed_precision.set_global_policy(args.mixed_precision)

    vocab = vocabulary_sizes(args.max_vocabulary)
    data = CriteoLike(vocab, seed=args.seed, zipf_exponent=args.zipf)
    model = build_dlrm(vocab, embedding_dim=args.embedding_dim, table_dtype=args.table_dtype)
    broadcast_dense_weights(model, hvd)
    model.compile(
        optimizer=DenseAllReduceOptimizer(keras.optimizers.Adam(args.learning_rate), hvd),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    if rank == 0:
        rows = sum(vocab)
        print(
            f"{num_ranks} rank(s), global batch {args.global_batch}, 26 tables of "
            f"{min(vocab)}..{max(vocab)} rows ({rows:,} rows x {args.embedding_dim}, "
            f"{args.table_dtype})",
            flush=True,
        )

    progress = Progress(
        make_evaluator(model, data, args.eval_samples, rank, num_ranks, hvd),
        args.steps_per_epoch * args.global_batch,
        hvd,
        verbose=rank == 0,
    )
    fit_verbose, progress_callbacks, step_log = fit_progress(
        args.log_every,
        args.global_batch,
        rank,
        num_ranks,
        functools.partial(mean_over_ranks, hvd=hvd),
    )
    model.fit(
        train_dataset(data, args.global_batch, rank, num_ranks),
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        callbacks=[*progress_callbacks, progress],
        shuffle=False,  # the stream is already random; fit would warn that it cannot shuffle
        verbose=fit_verbose,
    )

    final = progress.history[-1]
    # The first epoch includes tracing; later ones show the steady state.
    steady = progress.epoch_seconds[1:] or progress.epoch_seconds
    samples_per_s = args.steps_per_epoch * args.global_batch * len(steady) / sum(steady)
    if rank == 0:
        print(
            f"final AUC {final['auc']:.4f}  oracle AUC {final['oracle_auc']:.4f}  "
            f"gap {final['oracle_auc'] - final['auc']:.4f}  samples/s {samples_per_s:,.0f}",
            flush=True,
        )
        if args.history_json:
            write_history(
                args.history_json,
                "dlrm",
                args,
                argv,
                num_ranks,
                progress.history,
                step_log.records,
            )
    return {
        "step_losses": mean_over_ranks(progress.step_losses, hvd).tolist(),
        "auc": final["auc"],
        "oracle_auc": final["oracle_auc"],
        "samples_per_s": samples_per_s,
        "history": progress.history,
    }


if __name__ == "__main__":
    main()
