"""sok_lite.dump / sok_lite.load: checkpoints of sharded and hash tables that reload on any
number of ranks. The directory format is described in docs/checkpoint_format.md.

Each rank writes only its own rows, in bounded chunks; each rank loads by streaming every shard
file and keeping the rows it owns under the current world size (a hash table's rows are assigned
a chunk at a time as they are read). A dump is written under a temporary name and renamed once
complete; a load validates everything before it assigns anything.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, TYPE_CHECKING, TypeAlias, TypeVar

import numpy as np
import numpy.typing as npt
import tensorflow as tf

from sok_lite import comm
from sok_lite._errors import table_label
from sok_lite.comm.base import Communicator
from sok_lite.io import dump_target
from sok_lite.io.manifest import (
    CONVERTIBLE_DTYPES,
    FORMAT,
    VERSION,
    Manifest,
    check_files,
    check_shards,
    file_dtype,
    read_manifest,
    sha256,
)
from sok_lite.io.manifest import (
    CheckpointError as CheckpointError,  # sok_lite.io.checkpoint.CheckpointError, too
)
from sok_lite.memory import layouts
from sok_lite.optim.optimizer_rules import rule_for, unwrap
from sok_lite.tables.staging import StagedRows, SwappedRows
from sok_lite.tables.table_kind import IdArray, Optimizer, RowArray, TableKind

if TYPE_CHECKING:
    from sok_lite.tables.dynamic import DynamicTable

_S = TypeVar("_S", bound=np.generic)
# A path a dump is written to or read from.
PathLike: TypeAlias = str | os.PathLike[str]

CHUNK_ROWS = 65536  # rows per read/write: bounds the memory a dump or load adds per table


def _barrier(communicator: Communicator) -> None:
    communicator.allreduce_sum(tf.constant(1, tf.int32)).numpy()


def _slot_names(optimizer: Optimizer | None, var: TableKind) -> list[str]:
    return [] if optimizer is None else [n for n, _ in rule_for(optimizer).slots]


def _table_meta(var: tf.Variable, optimizer: Optimizer | None) -> dict[str, object]:
    if not isinstance(var, TableKind):
        raise TypeError(
            f"'{table_label(var)}': dump and load take sok_lite.Variable and DynamicVariable "
            f"tables, got {type(var).__name__}"
        )
    meta: dict[str, object] = {
        "name": table_label(var),
        "dtype": var.dtype.name,
        "slots": _slot_names(optimizer, var),
    }
    slot_dtype = getattr(var, "slot_dtype", None)
    if optimizer is not None and slot_dtype is not None:
        # Informative: slots are written as float32 and converted to the loading table's.
        meta["slot_dtype"] = slot_dtype.name
    meta.update(var.checkpoint_meta())
    return meta


def dump(
    path: PathLike,
    variables: Sequence[TableKind],
    optimizer: Optimizer | None = None,
    since_step: int | None = None,
) -> None:
    """Writes tables (and, with an optimizer, their slots and step) to directory `path`.

    Every rank must call it with the same tables in the same order. Each rank writes its own
    rows; `path` appears only once every rank has finished (a crash leaves any previous
    checkpoint at `path` as it was).

    Args:
      path: the checkpoint directory: created, or replacing an empty directory or a previous
        checkpoint (one holding only the files a dump writes); anything else is refused.
      variables: sok_lite.Variable / DynamicVariable tables.
      optimizer: the Keras optimizer (or a sok_lite wrapper of one) whose slots and iterations
        to save: the row-wise slots of tables it stepped under OptimizerScope, else the slots
        Keras keeps for a table it applied itself.
      since_step: an incremental dump: only rows that optimizer steps after `since_step`
        changed (needs the optimizer). `load([base, increment, ...])` applies a chain.

    Raises:
      ValueError: since_step without an optimizer, or for a table Keras applied itself (its
        changed rows are not recorded); a `path` (or `<path>.tmp`) that is not sok_lite's to
        replace. On any error nothing at `path` changes and no `<path>.tmp` is left.
    """
    if since_step is not None and optimizer is None:
        raise ValueError("an incremental dump (since_step) needs the optimizer")
    # The step count is the object's given (a SOK-style wrapper counts its own steps); the
    # slots are the wrapped optimizer's.
    iterations = None if optimizer is None else int(optimizer.iterations.numpy())
    optimizer = unwrap(optimizer)
    metas = [_table_meta(v, optimizer) for v in variables]  # refuses a non-table first
    communicator = comm.current()
    final = pathlib.Path(path)
    dump_target.check_target(final, FORMAT)  # every rank, before any changes: all refuse alike
    tmp = dump_target.staging_path(final)
    _barrier(communicator)
    if communicator.rank == 0:
        dump_target.make_staging(tmp)
    _barrier(communicator)
    try:
        _write_shards(tmp, variables, metas, optimizer, since_step, communicator.rank)
        _barrier(communicator)
        if communicator.rank == 0:
            _write_manifest(tmp, metas, optimizer, iterations, since_step, communicator)
            dump_target.replace(tmp, final)
    except BaseException:
        if communicator.rank == 0 and tmp.exists():
            dump_target.remove_dump_dir(tmp)  # the incomplete dump, never a complete one
        raise
    _barrier(communicator)


def _write_shards(
    tmp: pathlib.Path,
    variables: Sequence[TableKind],
    metas: list[dict[str, object]],
    optimizer: Optimizer | None,
    since_step: int | None,
    rank: int,
) -> None:
    """Writes this rank's rows of every table, and rank<r>.json listing its files."""
    files: dict[str, dict[str, object]] = {}
    for t, var in enumerate(variables):
        chunks = var.checkpoint_chunks(optimizer, since_step, CHUNK_ROWS)
        ids_file = tmp / f"t{t}.r{rank}.ids"
        rows_file = tmp / f"t{t}.r{rank}.rows"
        count, width = 0, None
        dtype = file_dtype(str(metas[t]["dtype"]))
        with open(ids_file, "wb") as fi, open(rows_file, "wb") as fr:
            for ids, rows in chunks:
                fi.write(np.ascontiguousarray(ids, "<i8").tobytes())
                fr.write(np.ascontiguousarray(rows, dtype).tobytes())
                count += len(ids)
                width = rows.shape[1] if rows.ndim == 2 else width
            for f in (fi, fr):
                f.flush()
                os.fsync(f.fileno())
        for written in (ids_file, rows_file):
            files[written.name] = {"bytes": written.stat().st_size, "sha256": sha256(written)}
        files[rows_file.name].update(rows=count, width=width, table=t, rank=rank)
        files[ids_file.name].update(rows=count, table=t, rank=rank)
    (tmp / f"rank{rank}.json").write_text(json.dumps(files))


def _write_manifest(
    tmp: pathlib.Path,
    metas: list[dict[str, object]],
    optimizer: Optimizer | None,
    iterations: int | None,
    since_step: int | None,
    communicator: Communicator,
) -> None:
    """The manifest, written last: a directory without one is not a complete checkpoint."""
    manifest: Manifest = {
        "format": FORMAT,
        "version": VERSION,
        "world_size": communicator.num_ranks,
        "optimizer": None if optimizer is None else type(optimizer).__name__,
        "iterations": iterations,
        "since_step": since_step,
        "tables": metas,
        "files": {},
    }
    for r in range(communicator.num_ranks):
        manifest["files"].update(json.loads((tmp / f"rank{r}.json").read_text()))
    with open(tmp / "manifest.json", "w") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def _check_table(
    meta: Manifest, var: TableKind, optimizer: Optimizer | None, manifest_path: pathlib.Path
) -> None:
    expected = _table_meta(var, optimizer)
    label = f"{manifest_path}: table '{meta.get('name')}'"
    if meta.get("dtype") not in CONVERTIBLE_DTYPES or expected["dtype"] not in CONVERTIBLE_DTYPES:
        keys: tuple[str, ...] = ("kind", "dim", "dtype")
    else:  # float dtypes convert into each other on load (a float32 dump into a 16-bit table)
        keys = ("kind", "dim")
    for key in keys:
        if meta.get(key) != expected[key]:
            raise CheckpointError(
                f"{label}: {key} {meta.get(key)!r}, the variable has {expected[key]!r}"
            )
    if meta["kind"] == "static" and meta["global_shape"] != expected["global_shape"]:
        raise CheckpointError(
            f"{label}: global shape {meta['global_shape']}, the variable has "
            f"{expected['global_shape']}"
        )
    if optimizer is not None and meta["slots"] != expected["slots"]:
        raise CheckpointError(
            f"{label}: slots {meta['slots']}, the optimizer needs {expected['slots']}"
        )


def _read(f: IO[bytes], dtype: np.dtype[_S], count: int) -> npt.NDArray[_S]:
    """The next `count` values of dtype from file f (its size was checked)."""
    return np.fromfile(f, dtype, count)


def _owned_pieces(
    final: pathlib.Path,
    manifest: Manifest,
    t: int,
    var: TableKind,
    width_out: int,
    communicator: Communicator,
) -> Iterator[tuple[IdArray, RowArray]]:
    """Yields (ids, rows) of table t that this rank owns now, reading the shard files at most
    CHUNK_ROWS rows at a time: the dump is never held whole. _check_shards came first."""
    rank, n = communicator.rank, communicator.num_ranks
    dtype = file_dtype(manifest["tables"][t]["dtype"])
    for r in range(manifest["world_size"]):
        info = manifest["files"][f"t{t}.r{r}.rows"]
        count, width = info["rows"], info["width"]
        with (
            open(final / f"t{t}.r{r}.ids", "rb") as fi,
            open(final / f"t{t}.r{r}.rows", "rb") as fr,
        ):
            for start in range(0, count, CHUNK_ROWS):
                k = min(CHUNK_ROWS, count - start)
                ids = _read(fi, np.dtype("<i8"), k)
                rows = _read(fr, dtype, k * width).reshape(k, width)
                mine = var.owners(ids, n) == rank
                if mine.any():
                    yield ids[mine], rows[mine, :width_out]


def _owned_count(
    final: pathlib.Path, manifest: Manifest, t: int, var: TableKind, communicator: Communicator
) -> int:
    """How many of table t's keys in a full dump this rank owns (its ids files only)."""
    rank, n = communicator.rank, communicator.num_ranks
    count = 0
    for r in range(manifest["world_size"]):
        total = manifest["files"][f"t{t}.r{r}.ids"]["rows"]
        with open(final / f"t{t}.r{r}.ids", "rb") as f:
            for start in range(0, total, CHUNK_ROWS):
                ids = _read(f, np.dtype("<i8"), min(CHUNK_ROWS, total - start))
                count += int(np.count_nonzero(var.owners(ids, n) == rank))
    return count


def _check_room(var: DynamicTable, rows: int, slots: int, path: pathlib.Path) -> None:
    """Refuses, before anything changes, a load of `rows` keys into a hash table whose
    capacity or disk tier's ram_budget cannot hold them on this rank."""
    label = f"{path}: table '{table_label(var)}'"
    if var.rank_capacity and rows > var.rank_capacity:
        raise CheckpointError(
            f"{label}: {rows} rows for rank {comm.current().rank}, more than its capacity of "
            f"{var.rank_capacity} (capacity={var.capacity} over all ranks): create the table "
            "with a larger capacity (or none) to load them"
        )
    if var.storage is None:
        return
    stride = layouts.hash_stride(var.dimension, slots, var.dtype)
    needed = layouts.tier_budget_for(rows, 1, stride)
    if needed > var.storage.ram_budget:
        raise CheckpointError(
            f"{label}: {rows} keys for rank {comm.current().rank}; the index of the keys on "
            f"disk alone needs a ram_budget of at least {needed} bytes (the table has "
            f"{var.storage.ram_budget}): raise ram_budget (sok.plan_memory sizes it)"
        )


def _owned_rows(
    final: pathlib.Path,
    manifest: Manifest,
    t: int,
    var: TableKind,
    width_out: int,
    communicator: Communicator,
) -> tuple[IdArray, RowArray]:
    """Every (ids, rows) of table t that this rank owns, in one piece (static tables)."""
    pieces = list(_owned_pieces(final, manifest, t, var, width_out, communicator))
    dtype = file_dtype(manifest["tables"][t]["dtype"])
    ids = np.concatenate([i for i, _ in pieces]) if pieces else np.zeros([0], np.int64)
    rows = np.concatenate([r for _, r in pieces]) if pieces else np.zeros([0, width_out], dtype)
    return ids, rows


def _chain_pieces(
    paths: list[pathlib.Path],
    manifests: list[Manifest],
    t: int,
    var: TableKind,
    width_out: int,
    communicator: Communicator,
) -> Iterator[tuple[IdArray, RowArray]]:
    """A hash table's pieces over a chain of dumps, in order: as the table assigns them, a
    key's row from a later dump replaces the earlier one."""
    for p, manifest in zip(paths, manifests):
        yield from _owned_pieces(p, manifest, t, var, width_out, communicator)


def load(
    path: PathLike | list[PathLike] | tuple[PathLike, ...],
    variables: Sequence[tf.Variable],
    optimizer: Optimizer | None = None,
) -> None:
    """Loads tables (and, with an optimizer, their slots and step) saved by `dump`.

    Works on any number of ranks: each rank keeps the rows it owns under the current world size.
    Every file is checked (presence, size, checksum) and every table's metadata compared with
    the variable before anything is assigned: on error no variable changes. A DynamicVariable's
    rows are then read and assigned a piece at a time (65,536 rows of a file), so a tiered
    table larger than RAM reloads.

    Args:
      path: a checkpoint directory, or a list: a full dump followed by incremental dumps
        (`dump(..., since_step=k)`) applied in order.
      variables: the tables, in the order they were dumped.
      optimizer: the Keras optimizer (or a sok_lite wrapper of one) to restore slots and
        iterations into (also into Keras' own slots of a table it was built with).

    Raises:
      CheckpointError (a ValueError): naming the file and the problem.

    >>> import pathlib, tempfile, numpy as np, sok_lite as sok
    >>> table = sok.Variable(np.arange(6).reshape(3, 2), dtype="float32")
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "step100"
    >>> sok.dump(path, [table])
    >>> _ = table.assign(np.zeros([3, 2]))
    >>> sok.load(path, [table])
    >>> table.numpy().tolist()
    [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    >>> sok.load(path.parent / "missing", [table])
    Traceback (most recent call last):
    ...
    sok_lite.CheckpointError: ...
    """
    step_counter = None if optimizer is None else optimizer.iterations  # as in dump
    optimizer = unwrap(optimizer)
    communicator = comm.current()
    paths = [pathlib.Path(p) for p in (path if isinstance(path, (list, tuple)) else [path])]
    manifests = [read_manifest(p) for p in paths]
    for i, (p, manifest) in enumerate(zip(paths, manifests)):
        if (manifest.get("since_step") is None) != (i == 0):
            kind = "a full dump" if i == 0 else "an incremental dump"
            raise CheckpointError(f"{p}: expected {kind} at position {i} of the chain")
        if len(manifest["tables"]) != len(variables):
            raise CheckpointError(
                f"{p}: {len(manifest['tables'])} tables saved, {len(variables)} given"
            )
        for meta, var in zip(manifest["tables"], variables):
            _check_table(meta, var, optimizer, p / "manifest.json")
        check_files(p, manifest)

    widths = []
    for t, meta in enumerate(manifests[0]["tables"]):
        slots = len(meta["slots"]) if optimizer is not None else 0
        widths.append(meta["dim"] * (1 + slots))
        for p, manifest in zip(paths, manifests):
            check_shards(p, manifest, t, widths[t])

    for t, var in enumerate(variables):
        # Only a bounded hash table has room to check: the others skip this read of the ids.
        if var.kind == "hash" and (var.rank_capacity or var.storage is not None):
            owned = _owned_count(paths[0], manifests[0], t, var, communicator)
            slots = len(manifests[0]["tables"][t]["slots"]) if optimizer is not None else 0
            _check_room(var, owned, slots, paths[0])

    # Row-numbered tables are read whole (their variables hold them whole anyway) to check that
    # every local row is there; hash tables are streamed while they are assigned, below.
    prepared: list[list[tuple[IdArray, RowArray]] | None] = []
    for t, var in enumerate(variables):
        if var.kind == "hash":
            prepared.append(None)
            continue
        width, meta = widths[t], manifests[0]["tables"][t]
        ids, rows = _owned_rows(paths[0], manifests[0], t, var, width, communicator)
        local_rows = int(var.shape[0])
        local = var.local_ids(ids, communicator.num_ranks)
        if len(local) != local_rows or set(local.tolist()) != set(range(local_rows)):
            raise CheckpointError(
                f"{paths[0]}: table '{meta['name']}' has {len(local)} "
                f"rows for this rank's {local_rows}"
            )
        order = np.argsort(local)
        ids, rows = ids[order], rows[order]
        for p, manifest in zip(paths[1:], manifests[1:]):  # increments overwrite rows
            inc_ids, inc_rows = _owned_rows(p, manifest, t, var, width, communicator)
            rows[var.local_ids(inc_ids, communicator.num_ranks)] = inc_rows
        prepared.append([(ids, rows)])

    # Everything that can be checked from the files is: now stage every table (a hash table's
    # files are streamed into a staging table a piece at a time), then commit them all. A
    # failure before the commit changes nothing; one during it undoes the tables committed.
    iterations = manifests[-1].get("iterations")
    staged: list[StagedRows] = []
    try:
        for t, var in enumerate(variables):
            pieces: Iterable[tuple[IdArray, RowArray]] | None = prepared[t]
            if pieces is None:
                pieces = _chain_pieces(paths, manifests, t, var, widths[t], communicator)
            staged.append(var.checkpoint_stage(pieces, optimizer, iterations))
        _commit(staged, step_counter, iterations)
    finally:
        for s in staged:
            s.discard()


def _commit(
    staged: list[StagedRows], step_counter: tf.Variable | None, iterations: int | None
) -> None:
    """Commits staged tables (hash tables first: their swaps are the steps that can fail),
    then the optimizer's step; undoes every commit made if one fails."""
    done = []
    try:
        for s in sorted(staged, key=lambda s: not isinstance(s, SwappedRows)):
            s.commit()
            done.append(s)
        if step_counter is not None and iterations is not None:
            step_counter.assign(iterations)
    except BaseException:
        for s in reversed(done):
            s.undo()
        raise
