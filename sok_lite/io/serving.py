"""sok_lite.export_saved_model: a SavedModel that serves with plain TensorFlow.

The model is traced once more in "serving mode", in which lookup_sparse reads plain copies of
the tables instead of calling sok_lite's ops: a static table becomes one tf.Variable with the
whole table; a DynamicVariable becomes a tf.lookup.experimental.MutableHashTable from key to row
plus a value matrix (restored from the checkpoint, so no key is a constant of the graph), and a
key it does not hold gets the row the training table would have created for it (the
initializer, computed with plain TF ops). The export refuses a traced graph that still
holds a SokLite op (a table missing from `tables`, say), so what it writes loads in a process
that never imports sok_lite.

The signature's inputs are named after the exported function's parameters (see
`export_saved_model`). With updatable=True the tables are those of
sok_lite.io.serving_updatable instead, which take deltas in place while serving.

Memory: no rank holds a table whole. The SavedModel is saved with placeholder tables (a rows
variable shaped [None, dim], an empty key map); then every table's rows stream into its
checkpoint, sok_lite.io.serving_stream.PIECE_ROWS rows a round over all ranks: beside its own
shard, a rank holds about a round's rows (a disk tier is read a piece at a time). The model is
written beside `path` and moved there at the end. The serving process loads the tables whole.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import pathlib
from collections.abc import Callable, Sequence

import tensorflow as tf

from sok_lite import comm
from sok_lite._errors import table_label
from sok_lite.io import serving_stream
from sok_lite.io.serving_init import initial_rows
from sok_lite.io.serving_updatable import OnlineState, UpdatableTable, placeholder_rows
from sok_lite.lookup.exported import ServingTable as ServingLookup
from sok_lite.lookup.exported import serving_copies
from sok_lite.tables.initializers import RowInitializer
from sok_lite.tables.table_dtypes import row_dtype
from sok_lite.tables.table_kind import ServingLayout, TableKind

_OP_PREFIX = "SokLite"


@dataclasses.dataclass
class ServingTable:
    """A table as plain TF resources: rows (and, for hash tables, a key -> row map).

    Exported with placeholder contents (rows [0, dim] of a variable shaped [None, dim], an empty
    map): sok_lite.io.serving_stream writes the real ones into the checkpoint afterwards."""

    rows: tf.Variable
    index: tf.lookup.experimental.MutableHashTable | None = None  # None: static, or no keys
    init: RowInitializer | None = None  # of a hash table; None for a static table

    @classmethod
    def of(cls, layout: ServingLayout) -> ServingTable:
        """The placeholder of a table of `layout` (its serving_layout())."""
        rows = placeholder_rows(layout.dtype, layout.dim)
        if not layout.is_hash:
            return cls(rows)
        # A table without rows gets no index: every key is then unseen and gets its initial row.
        index = None
        if layout.rows:
            index = tf.lookup.experimental.MutableHashTable(tf.int64, tf.int64, -1)
        return cls(rows, index, layout.init)

    @property
    def row_dtype(self) -> tf.DType:
        """The dtype lookups return: float32 for a 16-bit table, as in training."""
        return row_dtype(self.rows.dtype)

    def lookup(self, ids: tf.Tensor) -> tf.Tensor:
        """The [n, dim] rows of `ids`, as the training table would return them."""
        if self.init is None:
            return tf.cast(tf.gather(self.rows, ids), self.row_dtype)
        return self._lookup_keys(ids, self.init)

    def _lookup_keys(self, ids: tf.Tensor, init: RowInitializer) -> tf.Tensor:
        """lookup() of a hash table: stored rows, and new rows for unseen ids."""
        fresh = self._initial_rows(ids, init)
        if self.index is None:
            return fresh
        pos = self.index.lookup(ids)
        found = tf.cast(tf.gather(self.rows, tf.maximum(pos, 0)), self.row_dtype)
        return tf.where((pos >= 0)[:, None], found, fresh)

    def _initial_rows(self, ids: tf.Tensor, init: RowInitializer) -> tf.Tensor:
        """The rows a hash table creates for unseen `ids`."""
        fresh = initial_rows(init, ids, int(self.rows.shape[1]))
        if self.rows.dtype != self.row_dtype:  # a 16-bit table stores its new rows rounded
            fresh = tf.cast(tf.cast(fresh, self.rows.dtype), self.row_dtype)
        return fresh


def export_saved_model(
    model_or_fn: Callable[..., object],
    path: str | os.PathLike[str],
    input_signature: Sequence[tf.TensorSpec],
    tables: Sequence[TableKind] | None = None,
    *,
    updatable: bool = False,
    model_id: str | None = None,
    sequence: int = 0,
    step: int = 0,
) -> None:
    """Writes a SavedModel whose "serving_default" signature runs without sok_lite.

    The signature's inputs are named after the function's parameters: `def predict(values,
    splits)` serves as `serve(values=..., splits=...)`. A Keras model's inputs take the names
    of its `inputs` (its features) when it has as many as `input_signature`. A TensorSpec's own
    name wins; an input with neither (a `*args` function) keeps TensorFlow's `args_<i>`.

    With several ranks every rank must call it (the rows stream from every rank); rank 0
    writes. The tables are streamed a piece at a time (see the module's "Memory").

    Args:
      model_or_fn: a Keras model or a function of the inputs that calls sok_lite lookups.
      path: the SavedModel directory. It is written beside it first and moved there at the
        end; an existing directory keeps its other files (as with tf.saved_model.save).
      input_signature: tf.TensorSpecs of the serving function's inputs (flat tensors; build
        ragged ids inside the function from values and row splits).
      tables: the sok_lite tables it uses; default: every sok_lite table among a Keras model's
        variables.
      updatable: also write the signatures "apply_delta" and "delta_state", through which
        the served tables take the deltas of a sok_lite.DeltaWriter in place while serving
        (sok_lite/io/delta_updater.py applies them; docs/user_guide.md, "Online learning").
      model_id: the updatable model's id: it takes only deltas of that id (required with
        updatable).
      sequence: the delta the exported tables are at (the DeltaWriter's `sequence` then).
      step: the optimizer step they are at (reported by "delta_state").

    Raises:
      ValueError: no tables given or found, or the traced model still calls a sok_lite op (it
        uses a table missing from `tables`, say), or updatable without a model_id. On any
        error (a table failing to stream included) nothing is written at `path`.
    """
    if tables is None:
        tables = [v for v in getattr(model_or_fn, "variables", []) if isinstance(v, TableKind)]
    if not tables:
        raise ValueError("export_saved_model needs the sok_lite tables the model uses")
    if updatable and not (isinstance(model_id, str) and model_id):
        raise ValueError("export_saved_model(updatable=True) needs a model_id (a non-empty str)")
    labels = [table_label(t) for t in tables]
    layouts = [t.serving_layout() for t in tables]  # every rank: a hash table counts its rows
    online, plain = None, []
    copies: list[ServingLookup]
    if updatable:
        assert model_id is not None
        updatables = [UpdatableTable.of(n, lay) for n, lay in zip(labels, layouts)]
        online = OnlineState(updatables, model_id, sequence, step)
        copies = list(updatables)
    else:
        plain = [ServingTable.of(lay) for lay in layouts]
        copies = list(plain)
    serving = dict(zip((t.ref() for t in tables), copies))
    signature = _named_signature(model_or_fn, input_signature)
    with serving_copies(serving):
        if online is None:
            fn = tf.function(lambda *args: model_or_fn(*args), input_signature=signature)
        else:
            state = online
            fn = tf.function(
                lambda *args: state.consistent(lambda: model_or_fn(*args)),
                input_signature=signature,
            )
        concrete = fn.get_concrete_function()
    _refuse_sok_lite_ops(concrete, labels)
    root = tf.Module()
    root.variables_ = list(concrete.variables)  # the model's own (dense) variables
    signatures = {"serving_default": concrete}
    if online is None:
        root.rows_ = [s.rows for s in plain]
        root.tables_ = [s.index for s in plain if s.index is not None]
    else:
        root.online_ = online
        signatures.update(online.signatures())
    _write(root, signatures, pathlib.Path(path), tables, layouts, labels, online)


def _write(
    root: tf.Module,
    signatures: dict[str, tf.types.experimental.ConcreteFunction],
    final: pathlib.Path,
    tables: Sequence[TableKind],
    layouts: Sequence[ServingLayout],
    labels: Sequence[str],
    online: OnlineState | None,
) -> None:
    """Saves `root` with its placeholder tables into a staging directory beside `final` (rank
    0), streams the tables' rows into its checkpoint (every rank) and moves it to `final`
    (rank 0). A failure on any rank raises on every rank and leaves nothing written."""
    communicator = comm.current()
    made: list[tuple[pathlib.Path, list[pathlib.Path]]] = []  # rank 0's staging directory
    targets: list[serving_stream.Target] | None = None

    def discard() -> None:
        for staging, created in made:
            serving_stream.discard(staging, created)

    def save() -> None:
        nonlocal targets
        made.append(serving_stream.make_staging(final))
        tf.saved_model.save(root, str(made[0][0]), signatures=signatures)
        targets = _targets(made[0][0], layouts, labels, online)

    _on_rank_0(communicator, save, discard)
    staging = made[0][0] if made else None
    try:
        written = serving_stream.stream_tables(staging, tables, layouts, targets)
    except BaseException:
        discard()
        raise

    def finish() -> None:
        assert staging is not None
        serving_stream.merge(staging, written)
        serving_stream.finish(staging, final)

    _on_rank_0(communicator, finish, discard)


def _on_rank_0(
    communicator: comm.Communicator, step: Callable[[], None], undo: Callable[[], None]
) -> None:
    """Runs `step` on rank 0 (undo() if it fails); then every rank raises if it failed."""
    failed = False
    try:
        if communicator.rank == 0:
            step()
    except BaseException:
        failed = True
        undo()
        raise
    finally:
        if communicator.num_ranks > 1:
            count = int(communicator.allreduce_sum(tf.constant(int(failed), tf.int64)))
            if count and not failed:
                raise RuntimeError("export_saved_model: rank 0 failed to write the model")


def _targets(
    staging: pathlib.Path,
    layouts: Sequence[ServingLayout],
    labels: Sequence[str],
    online: OnlineState | None,
) -> list[serving_stream.Target]:
    """Where each table's rows go in the saved checkpoint."""
    prefix = str(staging / "variables" / "variables")
    targets, index = [], 0
    for t, (layout, label) in enumerate(zip(layouts, labels)):
        target = serving_stream.Target(f"table {t} ('{label}')", layout)
        if online is not None:
            table = online.tables[t]
            if layout.is_hash:
                path = ["online_", "hash_tables", str(index)]
                target.index_key = serving_stream.index_key(prefix, path)
                target.pack = table.stored
            else:
                path = ["online_", "rows", str(t - index)]
                target.rows_key = serving_stream.rows_key(prefix, path)
        else:
            target.rows_key = serving_stream.rows_key(prefix, ["rows_", str(t)])
            if layout.is_hash and layout.rows:
                target.index_key = serving_stream.index_key(prefix, ["tables_", str(index)])
        index += layout.is_hash and (online is not None or layout.rows > 0)
        targets.append(target)
    return targets


def _named_signature(
    model_or_fn: Callable[..., object], input_signature: Sequence[tf.TensorSpec]
) -> list[tf.TensorSpec]:
    """`input_signature` with each unnamed TensorSpec named after its input."""
    names = _input_names(model_or_fn, len(input_signature))
    return [
        tf.TensorSpec(spec.shape, spec.dtype, name)
        if isinstance(spec, tf.TensorSpec) and not spec.name and name
        else spec
        for spec, name in zip(input_signature, names)
    ]


def _input_names(model_or_fn: Callable[..., object], count: int) -> list[str | None]:
    """Per input, a Keras model's feature name or the function's positional parameter name
    (None where there is none)."""
    features = getattr(model_or_fn, "inputs", None)
    if isinstance(features, (list, tuple)) and len(features) == count:
        names = [_identifier(getattr(x, "name", None)) for x in features]
        if all(names):
            return names
    try:
        params = inspect.signature(model_or_fn).parameters.values()
    except (TypeError, ValueError):  # a callable Python cannot inspect
        return [None] * count
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    named: list[str | None] = [p.name for p in params if p.kind in positional]
    named = named[:count]
    return named + [None] * (count - len(named))


def _identifier(name: object) -> str | None:
    """A Keras input name as a signature key (the part before any ':'); None if unusable."""
    if not isinstance(name, str):
        return None
    name = name.split(":")[0]
    return name if name.isidentifier() else None


def _refuse_sok_lite_ops(
    concrete: tf.types.experimental.ConcreteFunction, exported: list[str]
) -> None:
    """Raises ValueError if the traced graph, or a function it calls, holds a sok_lite op: the
    SavedModel would not load without sok_lite.

    exported: the names of the tables the export copies; the message names the op's tables
    that are not among them.
    """
    found = _sok_lite_nodes(concrete.graph.as_graph_def())
    if not found:
        return
    missing = _missing_tables([node for _, node in found], exported)
    # The op to name: one that reads a missing table, where there is one.
    function, node = next(((f, n) for f, n in found if set(_op_tables(n)) & set(missing)), found[0])
    where = f"node '{node.name}'" + (f" of function '{function}'" if function else "")
    tables = f"; tables missing from tables=: {', '.join(missing)}" if missing else ""
    raise ValueError(
        f"export_saved_model: the traced model still calls sok_lite op {node.op} ({where})"
        f"{tables}. It would not serve without sok_lite: pass every table the model uses in "
        "tables="
    )


def _missing_tables(nodes: Sequence[tf.compat.v1.NodeDef], exported: list[str]) -> list[str]:
    """The labels of the tables `nodes` read ("table 1 ('clicks')") that are not exported."""
    labels = [label for node in nodes for label in _op_tables(node)]
    missing = [label for label in labels if not any(f"'{n}'" in label for n in exported)]
    return list(dict.fromkeys(missing))


def _sok_lite_nodes(
    graph_def: tf.compat.v1.GraphDef,
) -> list[tuple[str | None, tf.compat.v1.NodeDef]]:
    """(library function name or None, node) of every sok_lite op in `graph_def`."""
    functions = [(None, graph_def.node)]
    functions += [(f.signature.name, f.node_def) for f in graph_def.library.function]
    return [(name, n) for name, nodes in functions for n in nodes if n.op.startswith(_OP_PREFIX)]


def _op_tables(node: tf.compat.v1.NodeDef) -> list[str]:
    """The table labels a sok_lite op carries in its table_name(s) attribute."""
    if "table_names" in node.attr:
        return [s.decode() for s in node.attr["table_names"].list.s if s]
    if "table_name" in node.attr and node.attr["table_name"].s:
        return [node.attr["table_name"].s.decode()]
    return []
