"""Progress inside an epoch: Keras' progress bar on a terminal, else a line every N steps.

A bar redraws one line in place, which only a terminal shows well; in a log file, or under
horovodrun (which pipes and interleaves the ranks' output), lines such as

    step   120/300  loss 0.4613  samples/s 48,210  ETA 6 s

are readable instead. The wide & deep example uses this module too.
"""

import argparse
import sys
import time

import keras


def add_log_every_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-every",
        type=int,
        default=None,
        help="steps between progress lines when stdout is not a terminal or there are several "
        "ranks (default: a fifth of --steps-per-epoch; 0: none)",
    )


def steps_between_lines(log_every: int | None, steps_per_epoch: int) -> int:
    """The --log-every value, or its default when it was not given."""
    return max(1, steps_per_epoch // 5) if log_every is None else log_every


def format_eta(seconds: float) -> str:
    """Seconds as "42 s" or "3 min 05 s".

    >>> format_eta(41.6), format_eta(185.2)
    ('42 s', '3 min 05 s')
    """
    seconds = round(seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


class StepLog(keras.callbacks.Callback):
    """Every `every` steps: the loss of the steps since the previous line, samples/s and ETA.

    Every rank must run it (the loss is averaged over ranks, a collective); only ranks with
    `verbose` print. A line never reaches back into the previous epoch: intervals restart with
    each epoch, so the time between epochs (evaluation) is never counted as training.

    Args:
      every: steps between lines (0: none).
      global_batch: samples per step, summed over ranks.
      average_over_ranks: maps a list of floats to their element-wise mean over all ranks.
      verbose: print the lines.

    Attributes:
      records: one {"step", "loss", "samples_per_s"} per line, steps counted from 1 over all
        epochs; kept whether or not the lines are printed.
    """

    def __init__(self, every: int, global_batch: int, average_over_ranks, verbose: bool):
        super().__init__()
        self.every = every
        self.global_batch = global_batch
        self.average_over_ranks = average_over_ranks
        self.verbose = verbose
        self.records: list[dict] = []

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self._mark(steps_done=0, mean_loss=0.0)

    def _mark(self, steps_done: int, mean_loss: float) -> None:
        self.marked_steps = steps_done
        self.marked_mean = mean_loss
        self.marked_time = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        steps_per_epoch, epochs = self.params["steps"], self.params["epochs"]
        step = self.epoch * steps_per_epoch + batch + 1
        if self.every <= 0 or step % self.every:
            return
        seconds = time.perf_counter() - self.marked_time
        # fit reports the running mean over the epoch: the mean of the steps since the mark
        # follows from the two running means.
        done, mean = batch + 1, float(logs["loss"])
        interval = done - self.marked_steps
        loss = (done * mean - self.marked_steps * self.marked_mean) / interval
        loss = float(self.average_over_ranks([loss])[0])
        samples_per_s = interval * self.global_batch / seconds
        record = {"step": step, "loss": loss, "samples_per_s": samples_per_s}
        self.records.append(record)
        self._mark(done, mean)
        if self.verbose:
            total = epochs * steps_per_epoch
            eta = format_eta((total - step) * seconds / interval)
            print(
                f"step {step:{len(str(total))}d}/{total}  loss {loss:.4f}  "
                f"samples/s {samples_per_s:,.0f}  ETA {eta}",
                flush=True,
            )


def fit_progress(
    log_every: int, global_batch: int, rank: int, num_ranks: int, average_over_ranks
) -> tuple[int, list, StepLog]:
    """fit's `verbose`, the progress callbacks to put first in fit's list, and the StepLog.

    Keras' bar is shown on one process whose stdout is a terminal; elsewhere rank 0 prints
    StepLog's lines. StepLog records its steps either way.
    """
    bar = num_ranks == 1 and sys.stdout.isatty()
    step_log = StepLog(log_every, global_batch, average_over_ranks, verbose=rank == 0 and not bar)
    if not bar:
        return 0, [step_log], step_log
    # Placed before the examples' epoch callbacks, the bar ends its line before they print.
    return 1, [keras.callbacks.ProgbarLogger(), step_log], step_log
