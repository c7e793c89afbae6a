"""DynamicVariable's rows as a whole and as a TableKind: export / assign / evict /
replace_rows, checkpointing, refused dense reads and updates, and the TableKind answers
(DynamicRows, a base class of DynamicVariable)."""

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NoReturn

import numpy as np
import tensorflow as tf

from sok_lite import comm
from sok_lite.ops import hash_table_ops
from sok_lite.tables.dynamic_config import RESTORE_ROWS, CreateArgs, _host_device, _table_ids
from sok_lite.tables.key_hash import OWNER_BY_HASH, hash_owner
from sok_lite.tables.staging import ReplayedRows, StagedRows, SwappedRows
from sok_lite.tables.table_dtypes import (
    check_value_range,
)
from sok_lite.tables.table_kind import (
    IdArray,
    Optimizer,
    RowArray,
    RowRule,
    ServingLayout,
    TableKind,
    optimizer_state,
)

if TYPE_CHECKING:
    from sok_lite.tables.initializers import RowInitializer
    from sok_lite.tables.placement import Placement


class DynamicRows:
    """The row-set methods and TableKind answers of a DynamicVariable (see dynamic.py)."""

    if TYPE_CHECKING:  # what the table class (dynamic.py) and its variable base provide
        handle: tf.Tensor
        name: str
        dtype: tf.DType
        _unique_id: str
        _key_dtype: tf.DType
        _dimension: int
        _placement: Placement
        _capacity: int | None
        _create_args: CreateArgs
        _tier_path: str
        _init: RowInitializer

        @property
        def rank_capacity(self) -> int | None: ...

        @property
        def _label(self) -> str: ...

        def _on_host(self) -> bool: ...

    def export(
        self, with_slots: bool = False, since_step: int | None = None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """(keys [n], values [n, dim]) stored on this rank; with_slots: rows [n, dim * (1 + k)],
        the value then each optimizer slot; since_step: only rows an optimizer step (or an
        assign) changed after that step."""
        keys, values = hash_table_ops.export(
            self.handle, with_slots, since_step, f"hash table '{self._label}'"
        )
        return tf.cast(keys, self._key_dtype), values

    def assign(
        self,
        keys: tf.Tensor,
        values: tf.Tensor,
        with_slots: bool = False,
        step: int | None = None,
        **unused: object,
    ) -> tf.Operation:
        """Stores rows for keys (this rank's table; callers route keys to their owners).

        step: the optimizer step the rows count as changed at (default: later than any step, so
        every following incremental dump includes them)."""
        keys = tf.convert_to_tensor(keys)
        if keys.dtype not in (tf.int32, tf.int64) or (
            keys.dtype == tf.int64 and self._key_dtype == tf.int32
        ):
            raise ValueError(
                f"'{self.name}': keys of dtype {keys.dtype.name} for a table keyed "
                f"by {self._key_dtype.name}"
            )
        values = check_value_range(
            values, self.dtype, self._label, "assigned value", self._dimension
        )
        values = tf.convert_to_tensor(values, tf.float32)
        width = values.shape[-1]
        if not with_slots and width is not None and width != self._dimension:
            raise ValueError(
                f"'{self.name}': values of width {width} for dimension {self._dimension}"
            )
        step = hash_table_ops.INT64_MAX if step is None else step
        return hash_table_ops.assign(
            self.handle,
            tf.cast(keys, tf.int64),
            values,
            with_slots,
            step,
            f"hash table '{self._label}'",
        )

    def evict(self, steps_unseen: int) -> tf.Tensor:
        """Removes rows not looked up during the last steps_unseen lookups; returns how many
        this rank removed."""
        return hash_table_ops.evict(self.handle, tf.constant(steps_unseen, tf.int64))

    def replace_rows(self, keys: tf.Tensor, rows: tf.Tensor) -> tf.Operation | None:
        """Makes this rank's table hold exactly `keys` with `rows`; every other row is dropped.

        Args:
          keys: int64 [n] keys this rank owns.
          rows: float32 [n, dimension * (1 + slots)]: the value, then each optimizer slot, as
            export(with_slots=True) gives them (slots missing from the table are laid out).
        """
        keys = tf.convert_to_tensor(keys)
        rows = tf.convert_to_tensor(rows)
        # Checked before the table is cleared: a bad restore must keep the rows it has.
        width = tf.shape(rows, out_type=tf.int64)[-1]
        checks = [
            tf.debugging.assert_rank(keys, 1, message=f"'{self._label}': keys must be 1-D"),
            tf.debugging.assert_rank(rows, 2, message=f"'{self._label}': rows must be 2-D"),
            tf.debugging.assert_equal(
                tf.size(keys, out_type=tf.int64),
                tf.shape(rows, out_type=tf.int64)[0],
                message=f"'{self._label}': as many rows as keys are needed",
            ),
            tf.debugging.assert_equal(
                tf.logical_and(width > 0, width % self._dimension == 0),
                True,
                message=f"'{self._label}': a row must be {self._dimension} columns per array "
                "(value, then optimizer slots)",
            ),
        ]
        checks = [c for c in checks if c is not None]  # eager asserts return None
        if tf.executing_eagerly() and self._on_host():
            # Built aside and swapped in: a replacement that fails part-way (a disk tier
            # that fills up) leaves the table as it was.
            staged = SwappedRows(
                self,
                self._new_staging_table,
                lambda handle: hash_table_ops.assign(
                    handle, keys, rows, with_slots=True, table_name=f"hash table '{self._label}'"
                ),
            )
            try:
                staged.commit()
            finally:
                staged.discard()
            return None
        with tf.control_dependencies(checks):
            cleared = hash_table_ops.clear(self.handle)
        with tf.control_dependencies([c for c in [cleared] if c is not None] + checks):
            return hash_table_ops.assign(self.handle, keys, rows, with_slots=True)

    # tf.train.Checkpoint: this rank's keys and rows (value and optimizer slots).
    def _serialize_to_tensors(self) -> dict[str, tf.Tensor]:
        keys, rows = hash_table_ops.export(self.handle, with_slots=True)
        return {"keys": keys, "rows": rows}

    def _restore_from_tensors(self, restored_tensors: dict[str, tf.Tensor]) -> tf.Operation | None:
        return self.replace_rows(restored_tensors["keys"], restored_tensors["rows"])

    # A hash table has no dense value: reading it whole is a mistake, not a copy.
    def value(self) -> NoReturn:
        raise ValueError(
            f"'{self._label}' is a DynamicVariable, a hash table with no dense value: read rows "
            "by key with tf.gather(table, keys), tf.nn.embedding_lookup or lookup_sparse, or "
            "every stored row with export(). A Keras model holding one has no get_weights(): "
            "save and restore it with save_weights() / load_weights(), model.save(), "
            "tf.train.Checkpoint or sok.dump / sok.load"
        )

    read_value = value

    def _dense_var_to_tensor(self, *args: object, **kwargs: object) -> tf.Tensor:
        return self.value()

    # --- TableKind: key k on rank hash(k) % N (or every key on rank K) ---------------------

    kind = "hash"
    checkpoint_kind = "dynamic"  # a hash table, as format version 1 of sok.dump names it
    apply_op = "SokLiteDynamicApply"
    id_limit = -1  # any key

    @property
    def owner_code(self) -> int:
        return self._placement.rank if self._placement.kind == "localized" else OWNER_BY_HASH

    @property
    def id_dtypes(self) -> tuple[tf.DType, ...]:
        return (tf.int32,) if self._key_dtype == tf.int32 else (tf.int32, tf.int64)

    def owners(self, ids: IdArray, num_ranks: int) -> IdArray:
        if self._placement.kind == "localized":
            return np.full(len(ids), self._placement.rank)
        return hash_owner(ids, num_ranks)

    def local_ids(self, ids: tf.Tensor, num_ranks: int) -> tf.Tensor:
        return ids  # a hash table stores rows by key

    @staticmethod
    def read_local(
        tables: Sequence[TableKind], ids: Sequence[tf.Tensor], labels: Sequence[str]
    ) -> list[tf.Tensor]:
        return [
            hash_table_ops.lookup(t.handle, i, int(t.shape[1]), label)
            for t, i, label in zip(tables, ids, labels)
        ]

    def combines_in_place(self, num_ranks: int) -> bool:
        # On one rank's CPU the dedup and the [unique, dim] copy of the rows cost more than
        # probing every id.
        if num_ranks != 1:
            return False
        return self._on_host()

    def lookup_combine(
        self,
        ids: tf.Tensor,
        splits: tf.Tensor,
        weights: tf.Tensor | None,
        combiner: str,
        hotness: int,
        label: str,
    ) -> tf.Tensor:
        return hash_table_ops.lookup_combine(
            self.handle, ids, splits, weights, self._dimension, combiner, hotness, label
        )

    def gradient_rows(self, values: tf.Tensor, indices: tf.Tensor) -> tf.IndexedSlices:
        return tf.IndexedSlices(values, indices)  # indices are keys: no dense shape

    def apply_rows(
        self,
        optimizer: Optimizer,
        rule: RowRule,
        grad: tf.IndexedSlices,
        hyper: tf.Tensor,
        step: tf.Tensor,
    ) -> None:
        # Slots live in the hash table beside each row.
        state = optimizer_state(optimizer, rule)
        if state is None:
            raise ValueError(f"'{self._label}': a row-wise update needs an optimizer")
        label = f"hash table '{self._label}'"
        hash_table_ops.apply(
            self.handle,
            grad.indices,
            grad.values,
            hyper,
            state.kernel,
            state.slot_fills,
            label,
            step,
        )

    def slot_variables(self, optimizer: Optimizer, rule: RowRule) -> None:
        return None

    def checkpoint_meta(self) -> dict[str, object]:
        return {"kind": self.checkpoint_kind, "dim": self._dimension}

    def checkpoint_chunks(
        self, optimizer: Optimizer | None, since_step: int | None, chunk_rows: int
    ) -> Iterator[tuple[IdArray, RowArray]]:
        fills = _slot_fills(optimizer)
        for keys, rows in self._export_pieces(optimizer is not None, since_step, chunk_rows):
            keys = keys.astype(np.int64)
            # A table the optimizer has not stepped yet has no slots laid out: save the values
            # its slots will start from, so that every checkpoint row has the manifest's width.
            missing = fills[rows.shape[1] // self._dimension - 1 :]
            if missing:
                pad = np.repeat(np.asarray(missing, np.float32), self._dimension)
                rows = np.concatenate([rows, np.broadcast_to(pad, (len(rows), len(pad)))], axis=1)
            yield keys, rows

    def _export_pieces(
        self, with_slots: bool, since_step: int | None, chunk_rows: int
    ) -> Iterator[tuple[IdArray, RowArray]]:
        """(keys, rows) NumPy pieces of at most chunk_rows rows over both tiers; at least one
        (maybe empty). A host table is read a piece at a time: a dump never holds it whole."""
        label = f"hash table '{self._label}'"
        if not self._on_host():
            keys, rows = hash_table_ops.export(self.handle, with_slots, since_step, label)
            keys, rows = keys.numpy(), rows.numpy()
            for start in range(0, max(len(keys), 1), chunk_rows):
                yield keys[start : start + chunk_rows], rows[start : start + chunk_rows]
            return
        cursor, first = 0, True
        while cursor >= 0:
            keys, rows, cursor = hash_table_ops.export_range(
                self.handle, cursor, chunk_rows, with_slots, since_step, label
            )
            cursor = int(cursor)
            if len(keys) or first:
                yield keys.numpy(), rows.numpy()
            first = False

    def checkpoint_stage(
        self,
        pieces: Iterable[tuple[IdArray, RowArray]],
        optimizer: Optimizer | None,
        step: int | None,
    ) -> StagedRows:
        """Loads pieces into a staging table beside this one; the table itself changes only
        when the result's commit() swaps them in (sok_lite.tables.staging)."""
        # With slots, assign lays them out in the table first (see SokLiteDynamicAssign), from
        # the optimizer's initial values: a key first seen after the restore starts its slots
        # there, as it would have without the restore.
        fills = _slot_fills(optimizer)
        with_slots = bool(fills)
        width = self._dimension * (1 + len(fills))
        step = -1 if step is None else step
        label = f"hash table '{self._label}'"
        # One empty assign first: it lays the slots out even when there are no rows.
        pieces = itertools.chain([(np.zeros([0], np.int64), np.zeros([0, width]))], pieces)

        def fill(handle: tf.Tensor) -> None:
            # A piece at a time: a tiered table spills between them, and the rows are never
            # whole in RAM.
            for ids, rows in pieces:
                for start in range(0, max(len(ids), 1), RESTORE_ROWS):
                    piece = slice(start, start + RESTORE_ROWS)
                    keys = tf.cast(tf.constant(ids[piece]), tf.int64)
                    values = tf.constant(rows[piece], tf.float32)
                    hash_table_ops.assign(handle, keys, values, with_slots, step, label, fills)
            self._check_capacity(handle)

        if not self._on_host():
            return ReplayedRows(self, fill)
        return SwappedRows(self, self._new_staging_table, fill)

    def _check_capacity(self, handle: tf.Tensor) -> None:
        """Refuses staged rows beyond this rank's capacity: a load must not leave the next
        lookup to drop them."""
        per_rank = self.rank_capacity
        held = int(hash_table_ops.size(handle))
        if per_rank and held > per_rank:
            raise ValueError(
                f"hash table '{self._label}': the rows loaded for rank "
                f"{comm.current().rank} are {held}, more than its capacity of {per_rank} "
                f"(capacity={self._capacity} over all ranks): create the table with a larger "
                "capacity (or none) to load them"
            )

    def _new_staging_table(self, tier_dir: str) -> tf.Tensor:
        """An empty host table configured as this one, its disk tier (if any) in tier_dir."""
        with tf.init_scope(), tf.device(_host_device()):
            return hash_table_ops.create_table(
                f"{self._unique_id}_staged_{next(_table_ids)}",
                tier_path=tier_dir,
                **self._create_args,
            )

    def export_rows(self) -> tuple[tf.Tensor, tf.Tensor]:
        return self.export()

    def assign_rows(self, ids: tf.Tensor, values: tf.Tensor) -> None:
        self.assign(ids, values)

    def serving_layout(self) -> ServingLayout:
        rows = int(comm.current().allreduce_sum(hash_table_ops.size(self.handle)))
        return ServingLayout(self.dtype, self._dimension, rows, self._init)


def _slot_fills(optimizer: Optimizer | None) -> list[float]:
    """The initial value of each of the optimizer's slots (none without an optimizer)."""
    state = optimizer_state(optimizer)
    return [] if state is None else state.slot_fills


class _Refused:
    """A tf.Variable method that a hash table refuses with a clear message."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._method = name

    def __get__(self, table: DynamicRows, owner: type | None = None) -> Callable[..., NoReturn]:
        method = self._method

        def refuse(*args: object, **kwargs: object) -> NoReturn:
            raise NotImplementedError(
                f"'{table._label}' is a DynamicVariable: {method}() is not supported; store "
                "rows with assign(keys, values) and train them through "
                "sok_lite.OptimizerWrapper or sok_lite.OptimizerScope"
            )

        return refuse


# Dense and scatter updates of tf.Variable would reach the hash table's handle as if it were a
# dense variable; each is refused with a clear message instead.
for _method in (
    "assign_add",
    "assign_sub",
    "scatter_add",
    "scatter_sub",
    "scatter_update",
    "scatter_max",
    "scatter_min",
    "scatter_mul",
    "scatter_div",
    "batch_scatter_update",
    "scatter_nd_add",
    "scatter_nd_sub",
    "scatter_nd_update",
    "scatter_nd_max",
    "scatter_nd_min",
):
    _refused = _Refused()
    _refused.__set_name__(DynamicRows, _method)
    setattr(DynamicRows, _method, _refused)
del _method, _refused
