"""The streaming half of sok_lite.export_saved_model: the SavedModel is saved with small
placeholder tables, then their entries in its variables/ checkpoint are replaced by the real
rows, a bounded piece at a time; nothing ever holds a table whole.

- Every rank reads its own rows a piece at a time (TableKind.checkpoint_chunks, a disk tier's
  rows included, at most PIECE_ROWS // ranks rows) and, per round, the ranks gather their pieces
  (three allgathers through sok_lite.comm); rank 0 writes what it got as slices of the table's
  checkpoint entries (SaveV2 with a slice spec), one small tensor bundle per piece. A
  distributed static table's round k is the rows [k c N, (k + 1) c N) (row i is on rank i % N),
  a localized one's the owner's next c rows; a hash table's rows take positions in the order
  they are written.
- The bundles are merged with the rest of the checkpoint (the dense variables and the object
  graph, copied from the bundle tf.saved_model.save wrote) by MergeV2Checkpoints, which moves
  files rather than copying them. RestoreV2 assembles the slices when the model loads: the
  serving process holds every table whole, as before, and needs no sok_lite.
- Everything is written into a hidden directory beside `path` (make_staging) and moved into
  place at the end (finish); on any failure only that directory is removed. Into an existing
  directory (a previous export, say) the files are moved one by one; nothing else there is
  touched, a previous export's data files that the new index does not name included (they
  are not the export's to delete).

A round also gathers each rank's [rows, failed, done]: a rank whose table fails to read tells
the others, so that every rank stops together instead of waiting in a collective.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import pathlib
import shutil
import uuid
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from sok_lite import comm
from sok_lite._tf_internals import VARIABLE_VALUE_KEY, trackable_object_graph
from sok_lite.tables.table_dtypes import row_dtype
from sok_lite.tables.table_kind import ServingLayout, TableKind

PIECE_ROWS = 65536  # rows a round gathers, over all ranks; tests lower it
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
PIECES = "sok_lite_pieces"  # the pieces' bundles, in the staging directory until merged

# Called with (table label, array) for every array of rows a round materializes on this rank
# (tests check the bound); None: nothing is called.
piece_hook: Callable[[str, np.ndarray], None] | None = None


@dataclasses.dataclass
class Target:
    """Where one table's rows go: its checkpoint entries and how a piece becomes them.

    rows_key: the rows variable's entry ([rows, dim]; None for an updatable hash table).
    index_key: a hash table's MutableHashTable entry prefix ("<key>-keys", "<key>-values").
    pack: an updatable hash table's rows -> the values its MutableHashTable stores.
    """

    label: str
    layout: ServingLayout
    rows_key: str | None = None
    index_key: str | None = None
    pack: Callable[[tf.Tensor], tf.Tensor] | None = None


def checkpoint_keys(prefix: str, path: Sequence[str]) -> dict[str, str]:
    """{attribute: checkpoint key} of the object reached from the saved root by the child names
    `path` (e.g. ["rows_", "0"]), read from the bundle's object graph."""
    graph = trackable_object_graph(tf.train.load_checkpoint(prefix).get_tensor(OBJECT_GRAPH_KEY))
    node = 0
    for name in path:
        node = next(c.node_id for c in graph.nodes[node].children if c.local_name == name)
    return {a.name: a.checkpoint_key for a in graph.nodes[node].attributes}


def rows_key(prefix: str, path: Sequence[str]) -> str:
    return checkpoint_keys(prefix, path)[VARIABLE_VALUE_KEY]


def index_key(prefix: str, path: Sequence[str]) -> str:
    return checkpoint_keys(prefix, path)["table"]


# --- the staging directory --------------------------------------------------------------


def make_staging(final: pathlib.Path) -> tuple[pathlib.Path, list[pathlib.Path]]:
    """A new hidden directory beside `final` (its missing parents created, as
    tf.saved_model.save would); returns it and the parents created, deepest last.

    Raises:
      ValueError: `final` exists and is not a directory; nothing is created then.
    """
    if final.is_symlink() or (final.exists() and not final.is_dir()):
        raise ValueError(f"export_saved_model: '{final}' exists and is not a directory")
    created = [p for p in reversed(final.parents) if not p.exists()]
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = final.parent / f".{final.name}.sok_lite-export-{uuid.uuid4().hex[:12]}"
    staging.mkdir()
    return staging, created


def discard(staging: pathlib.Path, created: Sequence[pathlib.Path]) -> None:
    """Removes the staging directory, then the parents make_staging created if still empty."""
    shutil.rmtree(staging, ignore_errors=True)
    for parent in reversed(created):
        with contextlib.suppress(OSError):
            parent.rmdir()


def finish(staging: pathlib.Path, final: pathlib.Path) -> None:
    """Moves the written SavedModel to `final`: a rename when `final` is missing; else, as
    tf.saved_model.save into an existing directory does, its files replace those of the same
    names there (nothing else there is touched)."""
    if not final.exists() and not final.is_symlink():
        os.rename(staging, final)
        return
    for folder, _, files in os.walk(staging):
        target = final / pathlib.Path(folder).relative_to(staging)
        target.mkdir(exist_ok=True)
        for name in files:
            os.replace(pathlib.Path(folder) / name, target / name)
    shutil.rmtree(staging)


# --- streaming -------------------------------------------------------------------------


def stream_tables(
    staging: pathlib.Path | None,
    tables: Sequence[TableKind],
    layouts: Sequence[ServingLayout],
    targets: Sequence[Target] | None,
) -> list[tuple[Target, list[str], int]]:
    """Every rank: streams every table's rows. Rank 0 (which passes its staging directory and
    the `targets`; the others None) writes the pieces' bundles and gets, per table, (target,
    bundles, rows written) for `merge`. Raises on every rank if a rank fails to read its rows
    or rank 0 to write them."""
    pieces = None
    if staging is not None:
        pieces = staging / PIECES
        pieces.mkdir()
    written = []
    for t, (table, layout) in enumerate(zip(tables, layouts)):
        target = None if targets is None else targets[t]
        prefix = None if pieces is None else pieces / f"t{t}"
        bundles, count = _stream_table(table, layout, target, prefix)
        if target is not None:
            written.append((target, bundles, count))
    return written


def _stream_table(
    table: TableKind, layout: ServingLayout, target: Target | None, prefix: pathlib.Path | None
) -> tuple[list[str], int]:
    """One table's rounds (every rank); rank 0 (with a target) writes each round's bundle.
    Returns the bundles and the rows written (rank 0)."""
    communicator = comm.current()
    ranks = communicator.num_ranks
    chunks = table.checkpoint_chunks(None, None, max(1, PIECE_ROWS // ranks))
    label = target.label if target is not None else ""
    wide = row_dtype(layout.dtype).as_numpy_dtype  # 16-bit rows travel as float32 (exact)
    bundles: list[str] = []
    count = 0  # rows written so far
    done, error = False, None
    for piece in itertools.count():
        ids, rows = np.zeros([0], np.int64), np.zeros([0, layout.dim], wide)
        if not done and error is None:
            try:
                ids, rows = next(chunks)
            except StopIteration:
                done = True
            except Exception as e:  # told to every rank below, then raised here
                error = e
        meta = tf.constant([[len(ids), error is not None, done]], tf.int64)
        metas = communicator.allgather(meta).numpy()
        if metas[:, 1].any():
            if error is not None:
                raise error
            failed = [r for r in range(ranks) if metas[r, 1]]
            raise RuntimeError(f"export_saved_model: {label or 'a table'} failed on rank {failed}")
        if metas[:, 2].all() and not metas[:, 0].any():
            return bundles, count
        all_ids = communicator.allgather(tf.constant(np.asarray(ids, np.int64))).numpy()
        all_rows = communicator.allgather(tf.constant(np.asarray(rows, wide))).numpy()
        if piece_hook is not None:
            piece_hook(label, all_rows)
        if target is None or prefix is None or not len(all_ids):
            continue
        try:  # a failure to write is told to every rank at the next round
            bundles += _write(target, all_ids, all_rows, count, f"{prefix}_{piece}")
            count += len(all_ids)
        except Exception as e:
            error = e
    raise AssertionError("unreachable")


def _write(target: Target, ids: np.ndarray, rows: np.ndarray, count: int, prefix: str) -> list[str]:
    """The bundles of one round's rows; count: the table's rows written before."""
    if target.layout.is_hash:
        return [_write_hash(target, ids, rows, count, prefix)]
    return _write_static(target, ids, rows, prefix)


def _write_static(target: Target, ids: np.ndarray, rows: np.ndarray, prefix: str) -> list[str]:
    """Slices of a static table's rows: one bundle per run of consecutive ids (one per round
    when ranks hold rows i % N, as they do)."""
    layout = target.layout
    order = np.argsort(ids, kind="stable")
    ids, rows = ids[order], rows[order]
    if len(np.unique(ids)) != len(ids) or ids[0] < 0 or ids[-1] >= layout.rows:
        raise RuntimeError(f"export_saved_model: {target.label}: row ids out of place")
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    bundles = []
    for run, (start, stop) in enumerate(zip([0, *breaks], [*breaks, len(ids)])):
        first = int(ids[start])
        spec = f"{layout.rows} {layout.dim} {first},{stop - start}:-"
        values = tf.cast(rows[start:stop], layout.dtype)
        assert target.rows_key is not None
        bundles.append(_save(f"{prefix}_{run}", [(target.rows_key, spec, values)]))
    return bundles


def _write_hash(
    target: Target, keys: np.ndarray, rows: np.ndarray, offset: int, prefix: str
) -> str:
    """A hash table's keys and rows as the slices [offset, offset + n) of its entries."""
    layout, n = target.layout, len(keys)
    total = layout.rows
    if offset + n > total:
        raise RuntimeError(
            f"export_saved_model: {target.label} held {total} rows when the export began and "
            "more were written: do not change a table while it is exported"
        )
    span = f"{offset},{n}"
    assert target.index_key is not None
    keys_entry = (f"{target.index_key}-keys", f"{total} {span}", tf.constant(keys, tf.int64))
    if target.pack is not None:  # updatable: the MutableHashTable holds the packed rows
        packed = target.pack(tf.constant(rows))
        width = int(packed.shape[1])
        values = (f"{target.index_key}-values", f"{total} {width} {span}:-", packed)
        return _save(prefix, [keys_entry, values])
    positions = tf.range(offset, offset + n, dtype=tf.int64)
    values = (f"{target.index_key}-values", f"{total} {span}", positions)
    assert target.rows_key is not None
    row_slice = f"{total} {layout.dim} {span}:-"
    stored = (target.rows_key, row_slice, tf.cast(rows, layout.dtype))
    return _save(prefix, [keys_entry, values, stored])


def _save(prefix: str, entries: Sequence[tuple[str, str, tf.Tensor]]) -> str:
    names, specs, tensors = zip(*entries)
    tf.raw_ops.SaveV2(
        prefix=prefix, tensor_names=list(names), shape_and_slices=list(specs), tensors=tensors
    )
    return prefix


def merge(staging: pathlib.Path, written: Sequence[tuple[Target, list[str], int]]) -> None:
    """Rank 0: replaces the streamed tables' entries of staging's variables/ checkpoint by the
    piece bundles (`stream_tables`' result), after checking that every table was written
    whole."""
    streamed: set[str] = set()
    bundles: list[str] = []
    for target, pieces, count in written:
        if count != target.layout.rows:
            raise RuntimeError(
                f"export_saved_model: {target.label} held {target.layout.rows} rows when the "
                f"export began and {count} were written: do not change a table while it is "
                "exported"
            )
        bundles += pieces
        if not count:
            continue  # nothing streamed: the placeholder's empty entry stays
        if target.rows_key is not None:
            streamed.add(target.rows_key)
        if target.index_key is not None:
            streamed |= {f"{target.index_key}-keys", f"{target.index_key}-values"}
    prefix = staging / "variables" / "variables"
    reader = tf.train.load_checkpoint(str(prefix))
    kept = [name for name in reader.get_variable_to_shape_map() if name not in streamed]
    rest = str(staging / PIECES / "rest")
    _save(rest, [(name, "", tf.constant(reader.get_tensor(name))) for name in kept])
    del reader
    for old in prefix.parent.iterdir():
        if old.name.startswith(prefix.name + "."):
            old.unlink()
    tf.raw_ops.MergeV2Checkpoints(
        checkpoint_prefixes=[rest, *bundles], destination_prefix=str(prefix), delete_old_dirs=False
    )
    shutil.rmtree(staging / PIECES)
