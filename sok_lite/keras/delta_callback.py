"""sok_lite.keras.DeltaCallback: writes deltas of a model's tables while `fit` trains it, for a
model exported with `export_saved_model(..., updatable=True)` to take while it serves."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence

import keras

from sok_lite.io.delta import DeltaWriter
from sok_lite.tables.table_kind import TableKind


class DeltaCallback(keras.callbacks.Callback):
    """Writes a delta (sok_lite.DeltaWriter) every `every_n_steps` training batches or
    `every_seconds`, and one at the end of training if rows changed since the last.

    The writer is created when training begins (or given): the first delta follows the state
    the tables are in then, which is the state to export the served model at, with the same
    model_id and sequence. It is kept across `fit` calls (`callback.writer`).

    Args:
      directory: where the deltas go (see DeltaWriter).
      model_id: the exported model's id.
      every_n_steps, every_seconds: when to write (at least one).
      snapshot_every: make every n-th delta a snapshot.
      tables: the tables, in the order the model was exported with (default: the model's
        sok_lite tables in the order of its variables, as export_saved_model finds them).
      sequence: the delta the served model is at.
      writer: a DeltaWriter to use instead (then every other argument is not used: the
        writer's own counts say when to write).

    Raises:
      ValueError: without a writer, neither every_n_steps nor every_seconds.

    >>> import sok_lite as sok
    >>> callback = sok.keras.DeltaCallback("/tmp/deltas", "ctr", every_n_steps=100)
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        model_id: str,
        every_n_steps: int | None = None,
        every_seconds: float | None = None,
        *,
        snapshot_every: int | None = None,
        tables: Sequence[TableKind] | None = None,
        sequence: int = 0,
        writer: DeltaWriter | None = None,
    ) -> None:
        super().__init__()
        if writer is None and every_n_steps is None and every_seconds is None:
            raise ValueError("DeltaCallback needs every_n_steps or every_seconds")
        self._directory, self._model_id, self._sequence = directory, model_id, sequence
        self._counts = (every_n_steps, every_seconds, snapshot_every)
        self._tables = tables
        self._writer = writer
        self.written: list[pathlib.Path] = []

    @property
    def writer(self) -> DeltaWriter | None:
        """The DeltaWriter (None before training begins)."""
        return self._writer

    def on_train_begin(self, logs: dict[str, object] | None = None) -> None:
        if self._writer is not None:
            return
        tables = self._tables
        if tables is None:
            tables = [v for v in self.model.variables if isinstance(v, TableKind)]
        every_n_steps, every_seconds, snapshot_every = self._counts
        self._writer = DeltaWriter(
            self._directory,
            tables,
            self.model.optimizer,
            self._model_id,
            sequence=self._sequence,
            every_n_steps=every_n_steps,
            every_seconds=every_seconds,
            snapshot_every=snapshot_every,
        )

    def on_train_batch_end(self, batch: int, logs: dict[str, object] | None = None) -> None:
        assert self._writer is not None
        written = self._writer.maybe_write()
        if written is not None:
            self.written.append(written)

    def on_train_end(self, logs: dict[str, object] | None = None) -> None:
        writer = self._writer
        if writer is not None and int(self.model.optimizer.iterations) > writer.base_step:
            self.written.append(writer.write())
