"""sok_lite.export_saved_model: a SavedModel that serves with plain TensorFlow.

The model is traced once more in "serving mode", in which lookup_sparse reads plain copies of
the tables instead of calling sok_lite's ops: a static table becomes one tf.Variable with the
whole table; a DynamicVariable becomes a tf.lookup.StaticHashTable from key to row plus a value
matrix, and a key it does not hold gets the row the training table would have created for it
(the initializer, computed with plain TF ops). The export refuses a traced graph that still
holds a SokLite op (a table missing from `tables`, say), so what it writes loads in a process
that never imports sok_lite.

The signature's inputs are named after the exported function's parameters (see
`export_saved_model`). With updatable=True the tables are those of
sok_lite.io.serving_updatable instead, which take deltas in place while serving.

Memory: the exporting process holds every table whole (gathered from all ranks) once.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable, Sequence

import tensorflow as tf

from sok_lite import comm
from sok_lite._errors import table_label
from sok_lite.io.serving_init import initial_rows
from sok_lite.io.serving_updatable import OnlineState, UpdatableTable
from sok_lite.lookup.exported import ServingTable as ServingLookup
from sok_lite.lookup.exported import serving_copies
from sok_lite.tables.initializers import RowInitializer
from sok_lite.tables.table_dtypes import row_dtype
from sok_lite.tables.table_kind import ServingRows, TableKind

_OP_PREFIX = "SokLite"


@dataclasses.dataclass
class ServingTable:
    """A table as plain TF resources: rows (and, for hash tables, a key -> row map)."""

    rows: tf.Variable
    index: tf.lookup.StaticHashTable | None = None  # None: a static table, or no keys
    init: RowInitializer | None = None  # of a hash table; None for a static table

    @classmethod
    def of(cls, copy: ServingRows) -> ServingTable:
        """The exported form of a table's serving_copy() (a ServingRows)."""
        if copy.keys is None:
            return cls(copy.rows)
        return cls.hash_table(copy.keys, copy.rows, copy.init)

    @classmethod
    def hash_table(
        cls, keys: tf.Tensor, rows: tf.Variable, init: RowInitializer | None
    ) -> ServingTable:
        """A hash table's copy: int64 `keys` (row i holds keys[i]) and their `rows`.

        A table without rows gets no index (TF's hash tables refuse to import nothing): every
        key is then unseen and gets its initial row.
        """
        if int(tf.size(keys)) == 0:
            return cls(rows, None, init)
        positions = tf.range(tf.size(keys, tf.int64))
        index = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, positions), -1)
        return cls(rows, index, init)

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

    Args:
      model_or_fn: a Keras model or a function of the inputs that calls sok_lite lookups.
      path: the SavedModel directory.
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
        uses a table missing from `tables`, say), or updatable without a model_id; nothing is
        written then.
    """
    if tables is None:
        tables = [v for v in getattr(model_or_fn, "variables", []) if isinstance(v, TableKind)]
    if not tables:
        raise ValueError("export_saved_model needs the sok_lite tables the model uses")
    if updatable and not (isinstance(model_id, str) and model_id):
        raise ValueError("export_saved_model(updatable=True) needs a model_id (a non-empty str)")
    labels = [table_label(t) for t in tables]
    online = None
    if updatable:
        assert model_id is not None
        copies = [UpdatableTable.of(n, t.serving_copy()) for n, t in zip(labels, tables)]
        online = OnlineState(copies, model_id, sequence, step)
        serving: dict[object, ServingLookup] = dict(zip((t.ref() for t in tables), copies))
    else:
        serving = {t.ref(): ServingTable.of(t.serving_copy()) for t in tables}
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
        plain = [s for s in serving.values() if isinstance(s, ServingTable)]
        root.rows_ = [s.rows for s in plain]
        root.tables_ = [s.index for s in plain if s.index is not None]
    else:
        root.online_ = online
        signatures.update(online.signatures())
    if comm.current().rank == 0:
        tf.saved_model.save(root, str(path), signatures=signatures)


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
