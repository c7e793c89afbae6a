"""Staged changes of a hash table: a load or a whole-table replacement is built aside and
swapped in at once, so that a call that fails part-way leaves the table as it was.

`SwappedRows` (host tables) fills a staging table configured like the live one, its disk tier in
a new directory beside the live tier, and commits by swapping the two tables' rows
(SokLiteDynamicSwapRows: the lookup step and slot layout move with the rows; counters and
configuration stay). A swap is its own inverse, so `undo` swaps back. `ReplayedRows` (device
tables, which have no swap kernel) keeps the live rows in host memory and writes them back if
the commit fails.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Protocol

import numpy as np
import tensorflow as tf

from sok_lite.ops import hash_table_ops
from sok_lite.tables.storage import destroy_table, remove_tier_dir


class _Table(Protocol):
    """The hash table whose rows are staged (sok_lite.tables.dynamic.DynamicTable)."""

    @property
    def handle(self) -> tf.Tensor: ...
    @property
    def _tier_path(self) -> str: ...


class StagedRows:
    """Rows built aside for a table: commit() puts them in place, undo() reverts a commit,
    discard() frees what staging took (always call it, committed or not)."""

    def commit(self) -> None:
        raise NotImplementedError

    def undo(self) -> None:
        raise NotImplementedError

    def discard(self) -> None:
        pass


class SwappedRows(StagedRows):
    """A staging table filled by fill(handle), swapped with the live table by commit()."""

    def __init__(
        self,
        table: _Table,
        create: Callable[[str], tf.Tensor],
        fill: Callable[[tf.Tensor], None],
    ) -> None:
        self._table = table
        self._tier_dir = _staging_dir(table._tier_path) if table._tier_path else ""
        self._handle: tf.Tensor | None = None
        try:
            self._handle = create(self._tier_dir)
            fill(self._handle)
        except BaseException:
            self.discard()
            raise

    def commit(self) -> None:
        hash_table_ops.swap_rows(self._table.handle, self._handle)

    undo = commit  # a swap is its own inverse

    def discard(self) -> None:
        if self._handle is not None:
            destroy_table(self._handle)
            self._handle = None
        if self._tier_dir:
            remove_tier_dir(self._tier_dir)
            self._tier_dir = ""


class ReplayedRows(StagedRows):
    """For a table with no swap kernel: commit() keeps the live rows (with slots) in host
    memory, clears the table and fills it; on failure, or by undo(), they are written back."""

    def __init__(self, table: _Table, fill: Callable[[tf.Tensor], None]) -> None:
        self._table = table
        self._fill = fill
        self._saved: tuple[np.ndarray, np.ndarray] | None = None

    def commit(self) -> None:
        keys, rows = hash_table_ops.export(self._table.handle, with_slots=True)
        self._saved = (keys.numpy(), rows.numpy())
        try:
            hash_table_ops.clear(self._table.handle)
            self._fill(self._table.handle)
        except BaseException:
            self.undo()
            raise

    def undo(self) -> None:
        if self._saved is None:  # nothing was committed
            return
        keys, rows = self._saved
        hash_table_ops.clear(self._table.handle)
        hash_table_ops.assign(self._table.handle, keys, rows, with_slots=True)

    def discard(self) -> None:
        self._saved = None


def _staging_dir(tier_dir: str) -> str:
    """A new directory beside a table's disk tier, on the same file system (the swap renames
    files between them)."""
    parent, base = os.path.split(os.path.normpath(tier_dir))
    return tempfile.mkdtemp(prefix=f"{base}.staging-", dir=parent)
