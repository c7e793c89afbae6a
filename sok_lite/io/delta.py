"""sok_lite.DeltaWriter: the training side of online learning. It writes, every N steps or
seconds, the rows changed since its previous delta and the hash-table keys deleted since, for
a model exported with `export_saved_model(..., updatable=True)` to take while it serves
(sok_lite/io/delta_updater.py, which this module shares its format with; the format:
docs/checkpoint_format.md, "Deltas").

Each rank writes its own rows' files into a hidden temporary directory; rank 0 then writes the
header (every file's size and SHA-256, and the header's own checksum), syncs it and renames
the directory to `delta-<sequence>` (or `snapshot-<sequence>`): a delta appears whole or not
at all.

Deleted keys: a hash table counts the rows it evicts (capacity, evict()). Only when that count
moved since the previous delta does the writer read the table's keys to find which keys it
sent before are gone (or were evicted and created again untrained, so serving them as unseen
keys gives the same rows); in between it keeps the keys it sent, 8 bytes each.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
from collections.abc import Iterator, Sequence
from typing import IO

import numpy as np
import tensorflow as tf

from sok_lite import comm
from sok_lite._errors import table_label
from sok_lite.io import delta_updater as protocol
from sok_lite.io import manifest
from sok_lite.io.checkpoint import _barrier
from sok_lite.io.dump_target import _sync_dir
from sok_lite.optim.optimizer_rules import unwrap
from sok_lite.tables.table_dtypes import row_dtype
from sok_lite.tables.table_kind import IdArray, Optimizer, RowArray, TableKind, optimizer_state

CHUNK_ROWS = 65536  # rows read from a table at a time
# Keys sent since the last reading of a hash table's keys, beyond which they are merged.
_MERGE_KEYS = 1 << 20
_TMP_PREFIX = ".tmp-"
_EMPTY_KEYS = np.zeros([0], np.int64)


def _positive(value: object, name: str, kinds: tuple[type, ...]) -> None:
    """Refuses a value (other than None) that is not a number of `kinds` above 0."""
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not isinstance(value, kinds)
        or value <= 0
    ):
        kind = " or ".join(k.__name__ for k in kinds)
        raise ValueError(f"DeltaWriter: {name} must be an {kind} > 0, got {value!r}")


def _distinct(keys: IdArray) -> IdArray:
    """np.unique(keys): sorted, each key once, by a sort and a comparison of neighbours: on
    2.2M int64 keys NumPy 2.4's np.unique took 1.2 s, this 0.02 s (the writer merges that many
    keys of a big hash table every few deltas, while training waits)."""
    keys = np.sort(keys)
    first = np.empty(len(keys), bool)
    first[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    return keys[first]


class _SentKeys:
    """The keys of one hash table that serving may hold with trained rows."""

    def __init__(self, table: TableKind) -> None:
        self._table = table
        self._evictions = self._evicted()
        self._known = self._trained()
        self._sent: list[IdArray] = []

    def _evicted(self) -> int | None:
        return self._table.memory_stats()["evictions"]

    def _trained(self) -> IdArray:
        """Every key whose row an optimizer step, an assign or a load changed."""
        keys = [k for k, _ in self._table.checkpoint_chunks(None, -1, CHUNK_ROWS)]
        return _distinct(np.concatenate(keys)) if keys else _EMPTY_KEYS

    def deletions(self) -> tuple[IdArray, _SentKeysUpdate]:
        """The keys to delete now, and the update to commit once the delta is written."""
        evictions = self._evicted()
        if evictions == self._evictions:
            return _EMPTY_KEYS, _SentKeysUpdate(self, None, evictions)
        trained = self._trained()
        before = _distinct(np.concatenate([self._known, *self._sent]))
        gone = np.setdiff1d(before, trained, assume_unique=True)
        return gone, _SentKeysUpdate(self, trained, evictions)

    def reset(self) -> _SentKeysUpdate:
        """After a snapshot: the keys read now."""
        return _SentKeysUpdate(self, self._trained(), self._evicted())


class _SentKeysUpdate:
    """A change of _SentKeys made by commit() (after the delta is on disk)."""

    def __init__(self, keys: _SentKeys, known: IdArray | None, evictions: int | None) -> None:
        self._keys, self._known, self._evictions = keys, known, evictions
        self.sent: list[IdArray] = []

    def commit(self) -> None:
        keys = self._keys
        keys._evictions = self._evictions
        if self._known is not None:
            keys._known, keys._sent = self._known, []
        keys._sent += self.sent
        if sum(len(s) for s in keys._sent) > max(_MERGE_KEYS, len(keys._known)):
            keys._known, keys._sent = _distinct(np.concatenate([keys._known, *keys._sent])), []


class DeltaWriter:
    """Writes deltas of tables for a served model to take while it serves.

    A delta holds, per table, the values (no optimizer slots) of the rows that changed since
    the previous delta (optimizer steps under OptimizerScope, assign, load), and, per hash
    table, the keys deleted since (evicted by capacity or evict()); a snapshot holds every
    row. Every rank calls `write` (or `maybe_write`) alike and writes its own rows; the
    directory `<directory>/delta-<sequence>` appears once all of them are on disk.

    The first delta follows the state of the tables when the writer is created: export the
    model (`export_saved_model(..., updatable=True, model_id=..., sequence=writer.sequence)`)
    at that state.

    Args:
      directory: where the deltas go (created if missing; shared by the ranks).
      tables: the tables, in the order the model was exported with.
      optimizer: the optimizer stepping them (its `iterations` counts the steps).
      model_id: the exported model's id (export_saved_model's model_id).
      sequence: the delta the served model is at (the next delta is sequence + 1).
      every_n_steps, every_seconds: when `maybe_write` writes: after that many optimizer
        steps, or seconds, since the previous delta (either, both or neither).
      snapshot_every: make every n-th delta a snapshot (a server that missed deltas catches
        up from it); None: only `write(snapshot=True)` writes one.
      keep_snapshots: after writing a snapshot, remove the deltas and snapshots before the
        n-th newest snapshot (only directories holding nothing but a delta's files, of this
        model_id); None: remove nothing.

    Raises:
      ValueError: a table that is not a sok_lite table, an empty model_id, or a count that is
        not positive.

    >>> import tempfile, keras, sok_lite as sok
    >>> table = sok.DynamicVariable(4, name="clicks")
    >>> optimizer = keras.optimizers.SGD(0.1)
    >>> writer = sok.DeltaWriter(tempfile.mkdtemp(), [table], optimizer, model_id="ctr")
    >>> writer.write().name
    'delta-000000000001'
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        tables: Sequence[TableKind],
        optimizer: Optimizer,
        model_id: str,
        *,
        sequence: int = 0,
        every_n_steps: int | None = None,
        every_seconds: float | None = None,
        snapshot_every: int | None = None,
        keep_snapshots: int | None = None,
    ) -> None:
        for t, table in enumerate(tables):
            if not isinstance(table, TableKind):
                raise ValueError(
                    f"DeltaWriter: table {t} ('{table_label(table)}') is a "
                    f"{type(table).__name__}, not a sok_lite table"
                )
        if not hasattr(optimizer, "iterations"):
            raise ValueError(
                f"DeltaWriter: the optimizer stepping the tables is needed (its iterations "
                f"count the steps), got {type(optimizer).__name__}"
            )
        if not isinstance(model_id, str) or not model_id:
            raise ValueError(f"DeltaWriter: model_id must be a non-empty str, got {model_id!r}")
        if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 0:
            raise ValueError(f"DeltaWriter: sequence must be an int >= 0, got {sequence!r}")
        _positive(every_n_steps, "every_n_steps", (int,))
        _positive(every_seconds, "every_seconds", (int, float))
        _positive(snapshot_every, "snapshot_every", (int,))
        _positive(keep_snapshots, "keep_snapshots", (int,))
        self._directory = pathlib.Path(directory)
        self._tables = list(tables)
        self._counter = optimizer  # its iterations: a SOK-style wrapper counts its own steps
        self._optimizer = unwrap(optimizer)
        self._model_id = model_id
        self._sequence = sequence
        self._every_n_steps = every_n_steps
        self._every_seconds = every_seconds
        self._snapshot_every = snapshot_every
        self._keep_snapshots = keep_snapshots
        self._base_step = self._step()
        self._last_time = time.time()
        self._sent = {
            t: _SentKeys(table) for t, table in enumerate(self._tables) if table.kind == "hash"
        }

    @property
    def sequence(self) -> int:
        """The last delta written (the one the served model is at when up to date)."""
        return self._sequence

    @property
    def base_step(self) -> int:
        """The optimizer step the last delta (or the writer's start) covers up to."""
        return self._base_step

    @property
    def directory(self) -> pathlib.Path:
        return self._directory

    def _step(self) -> int:
        return int(self._counter.iterations.numpy())

    def due(self) -> bool:
        """Whether `maybe_write` would write now (with several ranks: if any rank's clock
        says so; every rank must call it)."""
        due = bool(self._every_n_steps) and (
            self._step() - self._base_step >= (self._every_n_steps or 0)
        )
        if self._every_seconds is not None:
            due = due or time.time() - self._last_time >= self._every_seconds
            communicator = comm.current()
            if communicator.num_ranks > 1:  # the ranks' clocks differ: agree on one answer
                due = int(communicator.allreduce_sum(tf.constant(int(due), tf.int32))) > 0
        return due

    def maybe_write(self) -> pathlib.Path | None:
        """Writes a delta if one is due (every_n_steps, every_seconds); returns its path."""
        if not self.due():
            return None
        return self.write()

    def write(self, snapshot: bool = False) -> pathlib.Path:
        """Writes the next delta (a snapshot with snapshot=True, or when snapshot_every says
        so) and returns its directory. Every rank must call it.

        Raises:
          ValueError: a delta of that sequence is already in the directory, or a file or
            directory where the delta is written that this writer did not make; nothing is
            written then and the writer's state is unchanged.
        """
        sequence = self._sequence + 1
        if self._snapshot_every and sequence % self._snapshot_every == 0:
            snapshot = True
        communicator = comm.current()
        step = self._step()
        name = protocol.delta_name(sequence, snapshot)
        final = self._directory / name
        tmp = self._directory / f"{_TMP_PREFIX}{name}"
        taken = [d[2] for d in self._listed() if d[0] == sequence] + [
            p for p in (tmp,) if p.exists() and not _is_leftover(p)
        ]
        if taken:
            raise ValueError(
                f"DeltaWriter: '{taken[0]}' exists: delta {sequence} of this directory was "
                "written already (another writer, or a writer restarted at an old sequence?)"
            )
        _barrier(communicator)
        if communicator.rank == 0:
            if tmp.exists():
                _remove_leftover(tmp)
            tmp.mkdir(parents=True)
        _barrier(communicator)
        try:
            updates = self._write_rank(tmp, snapshot, communicator.rank)
            _barrier(communicator)
            if communicator.rank == 0:
                self._write_header(tmp, sequence, step, snapshot, communicator.num_ranks)
                os.rename(tmp, final)
                _sync_dir(self._directory)
        except BaseException:
            if communicator.rank == 0 and tmp.exists():
                _remove_leftover(tmp)
            raise
        _barrier(communicator)
        for update in updates:
            update.commit()
        self._sequence, self._base_step, self._last_time = sequence, step, time.time()
        if snapshot and communicator.rank == 0:
            self._prune()  # the delta is written: a failure here leaves older deltas only
        return final

    def _prune(self) -> None:
        """Removes the deltas before the keep_snapshots-th newest snapshot (see __init__)."""
        keep = self._keep_snapshots
        snapshots = [d[0] for d in self._listed() if d[1]]
        if keep is None or len(snapshots) <= keep:
            return
        for sequence, _, path in self._listed():
            if sequence < snapshots[-keep] and _is_leftover(path) and self._ours(path):
                _remove_leftover(path)

    def _ours(self, path: pathlib.Path) -> bool:
        try:
            return protocol.read_header(path).model_id == self._model_id
        except protocol.DeltaError:
            return False

    def _listed(self) -> list[tuple[int, bool, pathlib.Path]]:
        return protocol.list_deltas(self._directory)

    def _write_rank(self, tmp: pathlib.Path, snapshot: bool, rank: int) -> list[_SentKeysUpdate]:
        """Writes this rank's files of every table and rank<r>.json listing them; returns
        the updates of the sent keys to commit once the delta is complete."""
        files: dict[str, dict[str, object]] = {}
        updates = []
        for t, table in enumerate(self._tables):
            deleted, update = _EMPTY_KEYS, None
            if t in self._sent:
                update = self._sent[t].reset() if snapshot else None
                if update is None:
                    deleted, update = self._sent[t].deletions()
                updates.append(update)
            names = protocol.table_files(t, rank)
            dtype = protocol.row_file_dtype(table.dtype.name)
            count, low, high = 0, 0, 0
            with open(tmp / names[0], "wb") as fk, open(tmp / names[1], "wb") as fr:
                for keys, rows in self._changed(table, snapshot):
                    fk.write(np.ascontiguousarray(keys, "<i8").tobytes())
                    fr.write(np.ascontiguousarray(rows, dtype).tobytes())
                    if len(keys):
                        first = count == 0
                        low = int(keys.min()) if first else min(low, int(keys.min()))
                        high = int(keys.max()) if first else max(high, int(keys.max()))
                    count += len(keys)
                    if update is not None and not snapshot:
                        update.sent.append(np.asarray(keys, np.int64))
                _sync(fk, fr)
            key_dtype, base = "<i8", 0
            if high - low < 1 << 32:
                key_dtype, base = "<u4", low
                _narrow_keys(tmp / names[0], count, low)
            with open(tmp / names[2], "wb") as fd:
                fd.write(np.ascontiguousarray(deleted, "<i8").tobytes())
                _sync(fd)
            counts = (count, count, len(deleted))
            for file_name, n, element in zip(names, counts, (key_dtype, dtype.str, "<i8")):
                path = tmp / file_name
                files[file_name] = {
                    "bytes": path.stat().st_size,
                    "sha256": manifest.sha256(path),
                    "count": n,
                    "dtype": element,
                    "base": base if file_name == names[0] else 0,
                }
        with open(tmp / f"rank{rank}.json", "w") as f:
            json.dump(files, f)
            _sync(f)
        return updates

    def _changed(self, table: TableKind, snapshot: bool) -> Iterator[tuple[IdArray, RowArray]]:
        """(global ids, values) of the rows this delta carries, a chunk at a time."""
        since = None if snapshot else self._base_step
        if table.kind == "hash" or snapshot:
            # Without an optimizer a table gives its values only; a hash table records its
            # changed rows itself.
            yield from table.checkpoint_chunks(None, since, CHUNK_ROWS)
            return
        state = optimizer_state(self._optimizer)
        assert state is not None
        local = state.changed_rows(table, self._base_step)
        held = table.export_rows()[0].numpy()
        for start in range(0, int(local.shape[0]), CHUNK_ROWS):
            idx = local[start : start + CHUNK_ROWS]
            rows = tf.cast(tf.gather(table, idx), row_dtype(table.dtype))
            yield held[idx.numpy()], rows.numpy()

    def _write_header(
        self, tmp: pathlib.Path, sequence: int, step: int, snapshot: bool, world_size: int
    ) -> None:
        files: dict[str, object] = {}
        for r in range(world_size):
            files.update(json.loads((tmp / f"rank{r}.json").read_text()))
        header: dict[str, object] = {
            "format": protocol.FORMAT,
            "version": protocol.VERSION,
            "model_id": self._model_id,
            "sequence": sequence,
            "snapshot": snapshot,
            "base_step": self._base_step,
            "step": step,
            "created": time.time(),
            "world_size": world_size,
            "tables": [_table_meta(t) for t in self._tables],
            "files": files,
        }
        header["checksum"] = protocol.header_checksum(header)
        with open(tmp / protocol.HEADER, "w") as f:
            json.dump(header, f, indent=1)
            _sync(f)


def _table_meta(table: TableKind) -> dict[str, object]:
    meta = table.checkpoint_meta()
    return {
        "name": table_label(table),
        "kind": table.kind,
        "dim": meta["dim"],
        "dtype": table.dtype.name,
    }


def _narrow_keys(path: pathlib.Path, count: int, base: int) -> None:
    """Rewrites a keys file of `count` int64 keys, each within 2^32 above `base`, in place as
    uint32 offsets from `base` (a delta of d = 16 float32 rows is then 6% keys, not 12%); a
    chunk at a time, writing behind what is read."""
    with open(path, "r+b") as f:
        for start in range(0, count, CHUNK_ROWS):
            f.seek(8 * start)
            wide = np.frombuffer(f.read(8 * min(CHUNK_ROWS, count - start)), "<i8")
            f.seek(4 * start)
            f.write((wide - base).astype("<u4").tobytes())
        f.truncate(4 * count)
        _sync(f)


def _sync(*files: IO[bytes] | IO[str]) -> None:
    for f in files:
        f.flush()
        os.fsync(f.fileno())


_WRITTEN = ("header.json",)


def _is_written_name(name: str) -> bool:
    """A file name a delta writer writes."""
    if name in _WRITTEN or (name.startswith("rank") and name.endswith(".json")):
        return True
    parts = name.split(".")
    return len(parts) == 3 and parts[2] in ("keys", "rows", "deleted")


def _is_leftover(path: pathlib.Path) -> bool:
    """A temporary delta directory of a write that did not finish: only a writer's files."""
    return path.is_dir() and all(f.is_file() and _is_written_name(f.name) for f in path.iterdir())


def _remove_leftover(path: pathlib.Path) -> None:
    for f in path.iterdir():
        if f.is_file() and _is_written_name(f.name):
            f.unlink()
    path.rmdir()
