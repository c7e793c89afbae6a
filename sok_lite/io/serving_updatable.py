"""The updatable export (`export_saved_model(..., updatable=True)`): tables that take row
updates in place while the SavedModel serves, still with plain TensorFlow ops only.

- A static table is one tf.Variable (as in the plain export); an update scatters rows into it.
- A hash table is a tf.lookup.experimental.MutableHashTable from key to its row, packed into
  int32 words (TF's mutable tables hold no 16-bit values) plus one word that marks the key as
  stored; an unseen key gets its initializer's row, as in the plain export.

Consistency: a request never sees half of an update. An update runs in one tf.function that
holds a mutex (a MutexV2 resource saved with the model); every request runs the model while
holding the same mutex, so it sees the tables wholly before or wholly after an update. The
cost: requests to one model run one at a time (TensorFlow has no reader-writer lock op, and
an optimistic check of update counters around a request proved unreliable: TF does not
order a request's table reads against plain counter reads firmly enough). An update costs no
second copy of any table: the RAM it adds is the delta's own tensors (a snapshot of a hash
table also exports that table's keys and rows once, to remove them).
"""

from __future__ import annotations

import dataclasses
import math
import uuid
from collections.abc import Callable, Sequence

import tensorflow as tf

from sok_lite.io import delta_updater as protocol
from sok_lite.io.serving_init import initial_rows
from sok_lite.tables.initializers import RowInitializer
from sok_lite.tables.table_dtypes import row_dtype
from sok_lite.tables.table_kind import ServingLayout


def placeholder_rows(dtype: tf.DType, dim: int) -> tf.Variable:
    """A table's exported rows variable, saved empty: its shape [None, dim] takes the rows the
    export writes into the checkpoint afterwards (sok_lite.io.serving_stream)."""
    return tf.Variable(
        tf.zeros([0, dim], dtype), shape=tf.TensorShape([None, dim]), trainable=False
    )


def words_per_row(dtype: tf.DType, dim: int) -> int:
    """The int32 words that hold one row of `dim` values of `dtype`."""
    return math.ceil(dim * int(dtype.size) / 4)


def pack_rows(rows: tf.Tensor, dim: int) -> tf.Tensor:
    """[n, dim] rows of a 2-, 4- or 8-byte float dtype as int32 [n, words_per_row]."""
    size = rows.dtype.size
    if size == 4:
        return tf.bitcast(rows, tf.int32)
    if size == 8:
        return tf.reshape(tf.bitcast(rows, tf.int32), [-1, 2 * dim])
    if dim % 2:  # two 16-bit values to a word: pad an odd row with a zero
        rows = tf.concat([rows, tf.zeros([tf.shape(rows)[0], 1], rows.dtype)], axis=1)
    return tf.bitcast(tf.reshape(rows, [-1, (dim + 1) // 2, 2]), tf.int32)


def unpack_rows(words: tf.Tensor, dtype: tf.DType, dim: int) -> tf.Tensor:
    """The [n, dim] rows of `dtype` that pack_rows packed into `words`."""
    if dtype.size == 4:
        return tf.bitcast(words, dtype)
    if dtype.size == 8:
        return tf.bitcast(tf.reshape(words, [-1, dim, 2]), dtype)
    halves = tf.reshape(tf.bitcast(words, dtype), [-1, 2 * ((dim + 1) // 2)])
    return halves[:, :dim]


@dataclasses.dataclass
class UpdatableTable:
    """One exported table that takes updates: a static table's rows, or a hash table."""

    name: str
    kind: str  # "static" or "hash"
    dtype: tf.DType  # the storage dtype
    dim: int
    row_count: int  # a static table's rows; -1 for a hash table
    rows: tf.Variable | None = None  # a static table's
    table: tf.lookup.experimental.MutableHashTable | None = None  # a hash table's
    init: RowInitializer | None = None  # a hash table's initializer of unseen keys

    @classmethod
    def of(cls, name: str, layout: ServingLayout) -> UpdatableTable:
        """The updatable placeholder of a table of `layout` (its serving_layout()): rows [0,
        dim] of a variable shaped [None, dim], or an empty hash table, which
        sok_lite.io.serving_stream fills in the checkpoint."""
        dtype, dim = layout.dtype, layout.dim
        if not layout.is_hash:
            return cls(name, "static", dtype, dim, layout.rows, rows=placeholder_rows(dtype, dim))
        words = words_per_row(dtype, dim)
        table = tf.lookup.experimental.MutableHashTable(
            tf.int64, tf.int32, tf.zeros([words + 1], tf.int32), name=f"online_{name}"
        )
        return cls(name, "hash", dtype, dim, -1, table=table, init=layout.init)

    @property
    def row_dtype(self) -> tf.DType:
        """The dtype lookups return: float32 for a 16-bit table, as in training."""
        return row_dtype(self.dtype)

    def stored(self, rows: tf.Tensor) -> tf.Tensor:
        """[n, dim] rows in the table's dtype as the int32 values the hash table holds: the
        packed row, then 1 (stored; a missing key's default has 0 there)."""
        words = pack_rows(tf.cast(rows, self.dtype), self.dim)
        return tf.concat([words, tf.ones([tf.shape(words)[0], 1], tf.int32)], axis=1)

    def lookup(self, ids: tf.Tensor) -> tf.Tensor:
        """The [n, dim] rows of `ids`, as the training table would return them."""
        if self.rows is not None:
            return tf.cast(tf.gather(self.rows, ids), self.row_dtype)
        assert self.table is not None and self.init is not None
        stored = self.table.lookup(ids)
        found = stored[:, -1] > 0
        rows = tf.cast(unpack_rows(stored[:, :-1], self.dtype, self.dim), self.row_dtype)
        fresh = initial_rows(self.init, ids, self.dim)
        if self.dtype != self.row_dtype:  # a 16-bit table stores its new rows rounded
            fresh = tf.cast(tf.cast(fresh, self.dtype), self.row_dtype)
        return tf.where(found[:, None], rows, fresh)

    def checks(
        self, t: int, keys: tf.Tensor, rows: tf.Tensor, deleted: tf.Tensor, snapshot: tf.Tensor
    ) -> list[tf.Operation]:
        """Assertions an update of this table must pass before anything changes."""
        label = f"delta: table {t} ('{self.name}')"
        found = [
            tf.debugging.assert_equal(
                tf.size(keys),
                tf.shape(rows)[0],
                message=f"{label}: the numbers of keys and of rows differ",
            )
        ]
        if self.rows is not None:
            count = self.row_count
            found += [
                tf.debugging.assert_equal(
                    tf.size(deleted), 0, message=f"{label}: a static table deletes no rows"
                ),
                tf.debugging.Assert(
                    tf.reduce_all((keys >= 0) & (keys < count)),
                    [f"{label}: row ids outside [0, {count})"],
                ),
                tf.debugging.Assert(
                    tf.logical_not(snapshot) | tf.equal(tf.size(keys), count),
                    [f"{label}: a snapshot must hold all {count} rows"],
                ),
            ]
        return found

    def apply(
        self, keys: tf.Tensor, rows: tf.Tensor, deleted: tf.Tensor, snapshot: tf.Tensor
    ) -> list[tf.Operation | tf.Tensor]:
        """The changes of one update: a snapshot first removes every stored key; deleted
        keys go, then the rows of `keys` are stored (a key in both ends up stored)."""
        if self.rows is not None:
            update = self.rows.scatter_update(tf.IndexedSlices(tf.cast(rows, self.dtype), keys))
            return [update]
        table = self.table
        assert table is not None

        def clear() -> tf.Tensor:
            held, _ = table.export()
            with tf.control_dependencies([table.remove(held)]):
                return tf.constant(True)

        cleared = tf.cond(snapshot, clear, lambda: tf.constant(False))
        with tf.control_dependencies([cleared]):
            removed = table.remove(deleted)
        with tf.control_dependencies([removed]):
            inserted = table.insert(keys, self.stored(rows))
        return [inserted]


class Mutex(tf.saved_model.experimental.TrackableResource):
    """A MutexV2 resource that is saved with the model and re-created when it loads.

    Named uniquely: unnamed, every mutex of a process would be the same one."""

    def __init__(self) -> None:
        self._shared_name = f"sok_lite_online_{uuid.uuid4().hex}"
        super().__init__()

    def _create_resource(self) -> tf.Tensor:
        return tf.raw_ops.MutexV2(shared_name=self._shared_name)

    def run(self, fn: Callable[[], object]) -> object:
        """fn()'s outputs, computed while holding the mutex (in a traced function)."""
        lock = tf.raw_ops.MutexLock(mutex=self.resource_handle)
        with tf.control_dependencies([lock]):
            outputs = fn()
        with tf.control_dependencies(tf.nest.flatten(outputs)):
            released = tf.raw_ops.ConsumeMutexLock(mutex_lock=lock)
        with tf.control_dependencies([released]):
            return tf.nest.map_structure(tf.identity, outputs)


class OnlineState(tf.Module):
    """What an updatable SavedModel holds besides the model: its tables, the delta it is at,
    and the mutex that keeps requests off half-applied updates."""

    def __init__(
        self, tables: Sequence[UpdatableTable], model_id: str, sequence: int, step: int
    ) -> None:
        super().__init__(name="online")
        self.tables = list(tables)
        self.rows = [t.rows for t in tables if t.rows is not None]
        self.hash_tables = [t.table for t in tables if t.table is not None]
        self.model_id = model_id
        self.sequence = tf.Variable(sequence, dtype=tf.int64, trainable=False, name="sequence")
        self.step = tf.Variable(step, dtype=tf.int64, trainable=False, name="step")
        self.mutex = Mutex()
        with tf.init_scope():  # created now: a traced function would make one of its own
            self.mutex.resource_handle  # noqa: B018

    def consistent(self, run: Callable[[], object]) -> object:
        """run()'s outputs from a state no update changes while it runs (see the module)."""
        return self.mutex.run(run)

    def input_signature(self) -> list[tf.TensorSpec]:
        """The apply signature's inputs: the header's fields, then per table t its
        t<t>_keys [n] int64, t<t>_rows [n, dim] (float64 for a float64 table, else float32)
        and t<t>_deleted [m] int64."""
        specs = [
            tf.TensorSpec([], tf.string, "model_id"),
            tf.TensorSpec([], tf.int64, "sequence"),
            tf.TensorSpec([], tf.int64, "step"),
            tf.TensorSpec([], tf.bool, "snapshot"),
        ]
        for t, table in enumerate(self.tables):
            wide = tf.float64 if table.dtype == tf.float64 else tf.float32
            specs += [
                tf.TensorSpec([None], tf.int64, f"t{t}_keys"),
                tf.TensorSpec([None, table.dim], wide, f"t{t}_rows"),
                tf.TensorSpec([None], tf.int64, f"t{t}_deleted"),
            ]
        return specs

    def apply(self, *args: tf.Tensor) -> dict[str, tf.Tensor]:
        """The apply signature (see delta_updater): checks, then one update under the mutex."""
        model_id, sequence, step, snapshot = args[:4]
        per_table = [args[4 + 3 * t : 7 + 3 * t] for t in range(len(self.tables))]
        checks = [
            tf.debugging.assert_equal(
                model_id,
                tf.constant(self.model_id),
                message=f"delta: of another model, this one is '{self.model_id}'",
            )
        ]
        for t, (table, (keys, rows, deleted)) in enumerate(zip(self.tables, per_table)):
            checks += table.checks(t, keys, rows, deleted, snapshot)

        def update() -> tf.Tensor:
            current = self.sequence.read_value()
            follows = (sequence <= current) | tf.equal(sequence, current + 1)
            in_order = tf.debugging.Assert(
                follows | snapshot,
                [
                    "delta: sequence gap: the model is at",
                    current,
                    "and a delta (not a snapshot) numbered",
                    sequence,
                    "can only follow the one before it",
                ],
            )
            with tf.control_dependencies([in_order]):
                return tf.cond(
                    sequence > current,
                    lambda: self._change(sequence, step, snapshot, per_table),
                    lambda: tf.constant(False),
                )

        with tf.control_dependencies(checks):
            applied = self.mutex.run(update)
        with tf.control_dependencies([applied]):
            return {"applied": applied, "sequence": self.sequence.read_value()}

    def _change(
        self,
        sequence: tf.Tensor,
        step: tf.Tensor,
        snapshot: tf.Tensor,
        per_table: Sequence[Sequence[tf.Tensor]],
    ) -> tf.Tensor:
        changes: list[tf.Operation | tf.Tensor] = []
        for table, (keys, rows, deleted) in zip(self.tables, per_table):
            changes += table.apply(keys, rows, deleted, snapshot)
        with tf.control_dependencies(changes):
            marks = [self.sequence.assign(sequence), self.step.assign(step)]
        with tf.control_dependencies(marks):
            return tf.constant(True)

    def state(self) -> dict[str, tf.Tensor]:
        """The state signature: the model id, the delta and step it is at, its tables."""
        return {
            "format": tf.constant(protocol.FORMAT),
            "version": tf.constant(protocol.VERSION, tf.int64),
            "model_id": tf.constant(self.model_id),
            "sequence": self.sequence.read_value(),
            "step": self.step.read_value(),
            "table_names": tf.constant([t.name for t in self.tables], tf.string),
            "table_kinds": tf.constant([t.kind for t in self.tables], tf.string),
            "table_dims": tf.constant([t.dim for t in self.tables], tf.int64),
            "table_dtypes": tf.constant([t.dtype.name for t in self.tables], tf.string),
            "table_rows": tf.constant([t.row_count for t in self.tables], tf.int64),
        }

    def signatures(self) -> dict[str, tf.types.experimental.ConcreteFunction]:
        """The apply and state signatures, by name."""
        apply = tf.function(lambda *a: self.apply(*a), input_signature=self.input_signature())
        state = tf.function(self.state, input_signature=[])
        return {
            protocol.APPLY_SIGNATURE: apply.get_concrete_function(),
            protocol.STATE_SIGNATURE: state.get_concrete_function(),
        }
