"""sok_lite.export_saved_model: a SavedModel that serves with plain TensorFlow.

The model is traced once more in "serving mode", in which lookup_sparse reads plain copies of
the tables instead of calling sok_lite's ops: a static table becomes one tf.Variable with the
whole table; a DynamicVariable becomes a tf.lookup.StaticHashTable from key to row plus a value
matrix, and a key it does not hold gets the row the training table would have created for it
(the initializer, computed with plain TF ops). The saved graph contains no SokLite op, so it
loads in a process that never imports sok_lite.

Memory: the exporting process holds every table whole (gathered from all ranks) once.
"""

import contextlib
import dataclasses

import tensorflow as tf

from sok_lite import comm
from sok_lite.serving_init import initial_rows
from sok_lite.table_dtypes import row_dtype
from sok_lite.table_kind import TableKind

_active: dict | None = None  # table ref -> ServingTable while exporting


@dataclasses.dataclass
class ServingTable:
    """A table as plain TF resources: rows (and, for hash tables, a key -> row map)."""

    rows: tf.Variable
    index: tf.lookup.StaticHashTable | None = None
    init: object = None  # RowInitializer of a hash table

    @property
    def row_dtype(self) -> tf.DType:
        """The dtype lookups return: float32 for a 16-bit table, as in training."""
        return row_dtype(self.rows.dtype)

    def lookup(self, ids: tf.Tensor) -> tf.Tensor:
        if self.index is None:
            return tf.cast(tf.gather(self.rows, ids), self.row_dtype)
        pos = self.index.lookup(ids)
        found = tf.cast(tf.gather(self.rows, tf.maximum(pos, 0)), self.row_dtype)
        fresh = initial_rows(self.init, ids, int(self.rows.shape[1]))
        if self.rows.dtype != self.row_dtype:  # a 16-bit table stores its new rows rounded
            fresh = tf.cast(tf.cast(fresh, self.rows.dtype), self.row_dtype)
        return tf.where((pos >= 0)[:, None], found, fresh)


def active_table(var) -> "ServingTable | None":
    """The serving copy of `var` while a model is being exported, else None."""
    return None if _active is None else _active.get(var.ref())


def combine(rows, row_splits, weights, combiner: str) -> tf.Tensor:
    """Plain-TF per-sample sum / mean / sqrtn of [n, dim] rows; a sample with no ids -> zeros."""
    w = tf.ones([tf.shape(rows)[0]], rows.dtype) if weights is None else weights
    weighted = tf.RaggedTensor.from_row_splits(rows * w[:, None], row_splits)
    summed = tf.reduce_sum(weighted, axis=1)
    if combiner == "sum":
        return summed
    w_ragged = tf.RaggedTensor.from_row_splits(w if combiner == "mean" else w * w, row_splits)
    denom = tf.reduce_sum(w_ragged, axis=1)
    if combiner == "sqrtn":
        denom = tf.sqrt(denom)
    return tf.math.divide_no_nan(summed, denom[:, None])


@contextlib.contextmanager
def _serving(tables):
    global _active
    previous, _active = _active, tables
    try:
        yield
    finally:
        _active = previous


def export_saved_model(model_or_fn, path, input_signature, tables=None) -> None:
    """Writes a SavedModel whose "serving_default" signature runs without sok_lite.

    Args:
      model_or_fn: a Keras model or a function of the inputs that calls sok_lite lookups.
      path: the SavedModel directory.
      input_signature: tf.TensorSpecs of the serving function's inputs (flat tensors; build
        ragged ids inside the function from values and row splits).
      tables: the sok_lite tables it uses; default: every sok_lite table among a Keras model's
        variables.

    Raises:
      ValueError: no tables given or found.
    """
    if tables is None:
        tables = [v for v in getattr(model_or_fn, "variables", []) if isinstance(v, TableKind)]
    if not tables:
        raise ValueError("export_saved_model needs the sok_lite tables the model uses")
    serving = {t.ref(): t.serving_copy() for t in tables}
    with _serving(serving):
        fn = tf.function(lambda *args: model_or_fn(*args), input_signature=input_signature)
        concrete = fn.get_concrete_function()
    root = tf.Module()
    root.variables_ = list(concrete.variables)  # the model's own (dense) variables
    root.rows_ = [s.rows for s in serving.values()]
    root.tables_ = [s.index for s in serving.values() if s.index is not None]
    if comm.current().rank == 0:
        tf.saved_model.save(root, str(path), signatures={"serving_default": concrete})
