"""sok_lite.keras.MemoryReportCallback: sok_lite.memory_report's numbers as TensorBoard
scalars while a model trains."""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf

from sok_lite.comm.shards import shards_of
from sok_lite.memory.layouts import MemoryEntry
from sok_lite.memory.report import MemoryReport, memory_report
from sok_lite.optim.row_wise import is_table
from sok_lite.tables.table_kind import Optimizer, TableKind

# The report's fields written per table, as "sok_lite_memory/<table>/<field>".
FIELDS = ("rows_ram", "rows_disk", "bytes_ram", "bytes_disk", "hit_rate", "spills", "evictions")


def _scalar_metadata() -> bytes:
    """What marks a summary as a scalar for TensorBoard's scalars plugin (tf.summary.scalar
    itself needs the tensorboard package installed; this needs TF only)."""
    plugin = tf.compat.v1.SummaryMetadata.PluginData(plugin_name="scalars")
    serialized: bytes = tf.compat.v1.SummaryMetadata(plugin_data=plugin).SerializeToString()
    return serialized


def write_scalar(tag: str, value: float, step: int) -> None:
    """A float32 scalar summary in the default writer, as tf.summary.scalar writes it."""
    tf.summary.write(tag, tf.constant(value, tf.float32), step=step, metadata=_scalar_metadata())


def _unique_labels(report: Sequence[MemoryEntry]) -> list[str]:
    """The tables' names, a repeated one suffixed _2, _3, ... so that no two share a tag."""
    seen: dict[str, int] = {}
    labels = []
    for entry in report:
        seen[entry["name"]] = seen.get(entry["name"], 0) + 1
        count = seen[entry["name"]]
        labels.append(entry["name"] if count == 1 else f"{entry['name']}_{count}")
    return labels


class MemoryReportCallback(keras.callbacks.Callback):
    """Writes the memory report of the model's sok_lite tables to TensorBoard summaries.

    Every `every_n_steps` training batches (and at the end of training) it writes, per table on
    this rank, the scalars sok_lite_memory/<table>/<field> for the fields rows_ram, rows_disk,
    bytes_ram, bytes_disk, hit_rate, spills and evictions (hit_rate only once it is defined),
    at the optimizer's step count (tables sharing a name get _2, _3, ... in the order of the
    model's weights). Under several ranks each rank writes its own tables: give
    each rank its own log_dir (for example with the rank in it).

    Args:
      log_dir: the directory to write event files to (a writer is created), or
      writer: a tf.summary writer to write with instead.
      every_n_steps: batches between two reports (>= 1).
      tables: the tables to report (default: every sok_lite table among the model's weights).
      optimizer: the optimizer whose slots count (default: the model's optimizer).

    Raises:
      ValueError: neither or both of log_dir and writer, or every_n_steps < 1.

    >>> import sok_lite as sok
    >>> callback = sok.keras.MemoryReportCallback("/tmp/logs", every_n_steps=100)
    """

    def __init__(
        self,
        log_dir: str | None = None,
        writer: tf.summary.SummaryWriter | None = None,
        every_n_steps: int = 100,
        tables: Sequence[TableKind] | None = None,
        optimizer: Optimizer | None = None,
    ) -> None:
        super().__init__()
        if (log_dir is None) == (writer is None):
            raise ValueError("MemoryReportCallback needs one of log_dir or writer")
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int):
            raise ValueError(f"every_n_steps must be an int >= 1, got {every_n_steps!r}")
        if every_n_steps < 1:
            raise ValueError(f"every_n_steps must be an int >= 1, got {every_n_steps}")
        self._log_dir = log_dir
        self._writer = writer
        self._every = every_n_steps
        self._tables = tables
        self._optimizer = optimizer
        self._batches = 0

    @property
    def writer(self) -> tf.summary.SummaryWriter:
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self._log_dir)
        return self._writer

    def _model_tables(self) -> list[TableKind]:
        if self._tables is not None:
            found = self._tables
        else:
            found = [w for w in self.model.weights if is_table(w)]
        return [shard for table in found for shard in shards_of(table)]

    def _step(self) -> int:
        optimizer = getattr(self.model, "optimizer", None)
        iterations = getattr(optimizer, "iterations", None)
        return self._batches if iterations is None else int(iterations)

    def write(self, step: int | None = None) -> MemoryReport:
        """Writes the report now (at `step`, default: the optimizer's step); returns it."""
        optimizer = self._optimizer
        if optimizer is None:
            optimizer = getattr(self.model, "optimizer", None)
        report = memory_report(self._model_tables(), optimizer)
        step = self._step() if step is None else step
        with self.writer.as_default():
            for entry, label in zip(report, _unique_labels(report)):
                for field in FIELDS:
                    if entry[field] is not None:
                        write_scalar(f"sok_lite_memory/{label}/{field}", entry[field], step)
        self.writer.flush()
        return report

    def on_train_batch_end(self, batch: int, logs: dict[str, object] | None = None) -> None:
        self._batches += 1
        if self._batches % self._every == 0:
            self.write()

    def on_train_end(self, logs: dict[str, object] | None = None) -> None:
        if self._batches % self._every:
            self.write()
