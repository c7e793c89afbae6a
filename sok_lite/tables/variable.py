"""sok_lite.Variable: a tf.Variable that holds this rank's shard of an embedding table."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeAlias, TypedDict, Unpack

import numpy as np
import tensorflow as tf

from sok_lite import comm
from sok_lite._errors import table_label
from sok_lite._tf_internals import VARIABLE_VALUE_KEY, ResourceVariable
from sok_lite.comm.shards import create_shards
from sok_lite.comm.strategy import StrategyCommunicator
from sok_lite.ops import lookup_ops
from sok_lite.ops.optimizer_ops import sparse_apply
from sok_lite.ops.table_assign_ops import assign_into_huge_pages, assigns_into_huge_pages
from sok_lite.tables.initializers import RowInitializer, row_initializer
from sok_lite.tables.key_hash import OWNER_BY_ROW, global_row
from sok_lite.tables.placement import PlacedTable, Placement
from sok_lite.tables.staging import StagedRows
from sok_lite.tables.table_dtypes import (
    check_slot_dtype,
    check_table_dtype,
    check_value_range,
    rounding_seed,
    row_dtype,
)
from sok_lite.tables.table_kind import (
    IdArray,
    MemoryStats,
    Optimizer,
    RowArray,
    RowRule,
    ServingLayout,
    TableKind,
    _row_owner,
    optimizer_state,
    ram_only,
)

# A table's global [rows, dim], as a tf.TensorShape or a list of ints.
ShapeLike: TypeAlias = tf.TensorShape | Sequence[int]


class _VariableArgs(TypedDict, total=False):
    """Variable's keyword arguments besides initial_value, shape and initializer."""

    dtype: tf.DType | str
    mode: str
    name: str | None
    trainable: bool
    slot_dtype: tf.DType | str | None


def _global_value(initial_value: object, dtype: tf.DType) -> tf.Tensor:
    if callable(initial_value):
        initial_value = initial_value()
    if isinstance(initial_value, np.ndarray) or not tf.is_tensor(initial_value):
        initial_value = np.asarray(initial_value)
    return tf.cast(initial_value, dtype)


def _local_row_ids(placement: Placement, rows: int, rank: int, num_ranks: int) -> tf.Tensor:
    """The global ids of the rows `rank` holds, in local order."""
    count = placement.local_rows(rows, rank, num_ranks)
    local = tf.range(count, dtype=tf.int64)
    return global_row(local, rank, num_ranks) if placement.kind == "distributed" else local


def _row_initializer(initializer: object) -> RowInitializer | None:
    if isinstance(initializer, RowInitializer):
        return initializer
    return row_initializer("random_normal" if initializer is None else initializer)


def _whole_table(initializer: object, shape: tf.TensorShape, dtype: tf.DType) -> tf.Tensor:
    """The global table from an initializer that is not computed per row: any
    callable(shape, dtype)."""
    if not callable(initializer):
        raise TypeError(f"{type(initializer).__name__!r} object is not callable")
    return tf.cast(initializer(shape, dtype=dtype), dtype)


def _local_value(
    initial_value: object,
    shape: ShapeLike | None,
    initializer: object,
    dtype: tf.DType,
    placement: Placement,
    rank: int,
    num_ranks: int,
) -> tuple[tf.Tensor, tf.TensorShape, bool]:
    """This rank's rows, the global shape, and whether SokLiteInitRows wrote (and advised) them."""
    if initial_value is not None:
        if shape is not None or initializer is not None:
            raise ValueError("pass either initial_value or shape/initializer, not both")
        value = _global_value(initial_value, dtype)
        if value.shape.rank != 2:
            raise ValueError(f"an embedding table must be 2-D [rows, dim], got shape {value.shape}")
        ids = _local_row_ids(placement, int(value.shape[0]), rank, num_ranks)
        return tf.gather(value, ids), value.shape, False
    if shape is None:
        raise ValueError("pass initial_value, or shape= (with an optional initializer=)")
    global_shape = tf.TensorShape(shape)
    if global_shape.rank != 2 or not global_shape.is_fully_defined():
        raise ValueError(f"an embedding table must be 2-D [rows, dim], got shape {global_shape}")
    rows, dim = global_shape.as_list()
    ids = _local_row_ids(placement, rows, rank, num_ranks)
    init = _row_initializer(initializer)
    if init is not None:
        return init(ids, dim, dtype), global_shape, True
    # Any other callable(shape, dtype): evaluated on the global shape, then sliced. Correct for
    # every rank count, but each rank computes the whole table once.
    return tf.gather(_whole_table(initializer, global_shape, dtype), ids), global_shape, False


def read_rows(
    tables: Sequence[TableKind], ids: Sequence[tf.Tensor], labels: Sequence[str]
) -> list[tf.Tensor]:
    """Rows [n, dim] of local row ids, per table, in one op (tables of one row dtype whose rows
    are a resource variable's, in local row order; 16-bit tables are read as float32)."""
    dtype = row_dtype(tables[0].dtype)
    return lookup_ops.gather_rows([t.handle for t in tables], list(ids), dtype, list(labels))


class Variable(PlacedTable, ResourceVariable, TableKind):
    """An embedding table whose rows are spread over the ranks of the job.

    This rank holds only its own rows: with mode "distributed", global row i lives on rank
    i % N at local row i // N; with "localized:K", rank K holds the whole table and every other
    rank a [0, dim] variable. With one rank the local shard is the whole table.

    Args:
      initial_value: the GLOBAL table, [rows, dim] (array, tensor or a callable returning one).
        Each rank keeps its rows.
      shape: the global [rows, dim], when initial_value is not given.
      initializer: with shape: a Keras initializer (name or object: RandomNormal, TruncatedNormal,
        RandomUniform, Zeros, Ones, Constant), a number, or any callable(shape, dtype). The Keras
        kinds are computed per row from (seed, global row id): the global table is the same for
        every number of ranks. Default "random_normal" (stddev 0.05).
      dtype: the storage dtype: float32, float64, or bfloat16 / float16 for 16-bit tables,
        whose rows are read as float32 (lookup results and gradients are float32, optimizer
        slots too) and rounded back after each optimizer step: bfloat16 stochastically (with
        bits drawn from the table's name, the step, the global row and the column, so the
        same on any number of ranks), float16 to nearest.
      slot_dtype: the dtype of the optimizer slots of a 16-bit table: None (float32) or
        bfloat16, which halves their memory (Adam: table + slots 0.5x of float32 instead of
        0.83x). bfloat16 slots keep float32's exponent range and are rounded back
        stochastically after each step (draws apart from the row's, the same on any number
        of ranks); see docs/user_guide.md "16-bit tables".
      mode: "distributed" or "localized:K".
      name: the variable name.
      trainable: whether the variable is trainable.

    Raises:
      ValueError: for a table that is not 2-D, an unsupported dtype or slot_dtype (float16 slots,
        16-bit slots beside a float32 / float64 table), an initial value beyond float16's range
        (magnitude over 65,504) for a float16 table, a bad mode or conflicting arguments.

    >>> import numpy as np, sok_lite as sok
    >>> v = sok.Variable(np.zeros([17, 3]), dtype="float32")
    >>> v.global_shape, v.mode
    (TensorShape([17, 3]), 'distributed')

    Under a tf.distribute strategy whose process runs several replicas (MirroredStrategy), the
    constructor returns a sok_lite.comm.shards.ReplicaShards: one Variable per replica, holding
    its rows, which stands for the running replica's shard inside strategy.run.
    """

    def __new__(
        cls,
        initial_value: object = None,
        *,
        shape: ShapeLike | None = None,
        initializer: object = None,
        **kwargs: Unpack[_VariableArgs],
    ) -> Variable:
        communicator = comm.current()
        if not isinstance(communicator, StrategyCommunicator) or communicator.shards_per_table == 1:
            table: Variable = super().__new__(cls)
            return comm.register_table(table)
        # Random values are drawn (and default seeds taken) once for the table, not per shard.
        dtype = tf.as_dtype(kwargs.get("dtype", tf.float32))
        if initial_value is not None:
            initial_value = _global_value(
                check_value_range(initial_value, dtype, kwargs.get("name")), dtype
            )
        elif shape is not None:
            init = _row_initializer(initializer)
            if init is None:
                initial_value = _whole_table(initializer, tf.TensorShape(shape), dtype)
                shape = None
            initializer = init
        # type escape: under a multi-replica strategy the constructor returns the table's
        # ReplicaShards, which stands for the running replica's shard
        return create_shards(  # type: ignore[return-value]
            lambda: cls(initial_value, shape=shape, initializer=initializer, **kwargs),
            communicator,
        )

    def __init__(
        self,
        initial_value: object = None,
        *,
        shape: ShapeLike | None = None,
        initializer: object = None,
        dtype: tf.DType | str = tf.float32,
        mode: str = "distributed",
        name: str | None = None,
        trainable: bool = True,
        slot_dtype: tf.DType | str | None = None,
    ) -> None:
        dtype = check_table_dtype(dtype, name)
        self._slot_dtype = check_slot_dtype(slot_dtype, dtype, name)
        placement = Placement.parse(mode)
        communicator = comm.current()
        rank, num_ranks = communicator.rank, communicator.num_ranks
        if placement.kind == "localized" and placement.rank >= num_ranks:
            raise ValueError(f"mode {mode!r} names rank {placement.rank} of {num_ranks}")
        # 16-bit tables: values are made in float32 and rounded to nearest once.
        local, global_shape, advised = _local_value(
            check_value_range(initial_value, dtype, name),
            shape,
            initializer,
            row_dtype(dtype),
            placement,
            rank,
            num_ranks,
        )
        check_value_range(local, dtype, name)  # values an initializer made
        advised &= local.dtype == dtype  # a cast to 16 bits writes a new buffer
        local = tf.cast(local, dtype)
        super().__init__(initial_value=local, trainable=trainable, name=name, dtype=dtype)
        if not advised and tf.executing_eagerly() and assigns_into_huge_pages(self, local):
            assign_into_huge_pages(self, local)  # the adopted buffer was written unadvised
        self._global_shape = global_shape
        self._placement = placement
        # Global row = local row * stride + offset: what a 16-bit table's rounding draws from.
        distributed = placement.kind == "distributed"
        self._row_numbering = (num_ranks, rank) if distributed else (1, 0)
        self._rounding_seed = rounding_seed(name, global_shape)

    @property
    def global_shape(self) -> tf.TensorShape:
        """The [rows, dim] of the whole table across ranks."""
        return self._global_shape

    @property
    def slot_dtype(self) -> tf.DType:
        """The dtype of this table's optimizer slots (float32 or bfloat16 beside a 16-bit
        table, else the table's dtype)."""
        return getattr(self, "_slot_dtype", row_dtype(self.dtype))

    def key_map(self, indices: tf.Tensor) -> tf.Tensor:
        """As in SOK: the local rows of global row ids that this rank owns (distributed: id // N;
        localized: the id itself)."""
        indices = tf.convert_to_tensor(indices)
        return self.local_ids(indices, tf.cast(comm.current().num_ranks, indices.dtype))

    def slot_variable(self, local_value: tf.Tensor, name: str) -> Variable:
        """A non-trainable variable with this table's placement, from this rank's local value.

        Used for optimizer slots, which follow their table row for row.
        """
        cls = type(self)
        slot: Variable = ResourceVariable.__new__(cls)  # one shard, whatever the strategy
        ResourceVariable.__init__(
            slot, initial_value=local_value, trainable=False, name=name, dtype=local_value.dtype
        )
        slot._global_shape = self.global_shape
        slot._placement = self.placement
        return slot

    # --- TableKind: row i on rank i % N (or every row on rank K) ----------------------------

    kind = "static"
    checkpoint_kind = "static"
    apply_op = "SokLiteSparseApply"
    id_dtypes = (tf.int32, tf.int64)
    read_local = staticmethod(read_rows)

    @property
    def id_limit(self) -> int:
        rows = self._global_shape[0]
        return -1 if rows is None else int(rows)

    @property
    def owner_code(self) -> int:
        return self._placement.rank if self._placement.kind == "localized" else OWNER_BY_ROW

    def owners(self, ids: IdArray, num_ranks: int) -> IdArray:
        if self._placement.kind == "localized":
            return np.full(len(ids), self._placement.rank)
        owner: IdArray = _row_owner(ids, num_ranks)[0]
        return owner

    def local_ids(self, ids: tf.Tensor, num_ranks: int) -> tf.Tensor:
        return ids if self._placement.kind == "localized" else _row_owner(ids, num_ranks)[1]

    def memory_stats(self) -> MemoryStats:
        """This rank's rows and their bytes, all in RAM (optimizer slots are separate
        variables: sok_lite.memory_report adds them). Lookups are not counted: hits and
        misses are 0, as are the disk fields."""
        rows = int(self.shape[0])
        return ram_only(rows, rows * int(self.shape[1]) * self.dtype.size)

    def held_ids(self) -> tf.Tensor:
        """The global ids of this rank's rows, in local order."""
        communicator = comm.current()
        rows = self.id_limit
        return _local_row_ids(self._placement, rows, communicator.rank, communicator.num_ranks)

    def gradient_rows(self, values: tf.Tensor, indices: tf.Tensor) -> tf.IndexedSlices:
        # The static shape: tf.shape(var) would read (and in copy-on-read mode copy) the table.
        return tf.IndexedSlices(values, indices, tf.constant(self.shape.as_list(), tf.int64))

    def apply_rows(
        self,
        optimizer: Optimizer,
        rule: RowRule,
        grad: tf.IndexedSlices,
        hyper: tf.Tensor,
        step: tf.Tensor,
    ) -> None:
        state = optimizer_state(optimizer, rule)
        if state is None:
            raise ValueError(f"'{table_label(self)}': a row-wise update needs an optimizer")
        handles = [s.handle for s in state.slots(self)]
        stride, offset = self._row_numbering
        sparse_apply(
            self.handle,
            handles,
            grad.indices,
            grad.values,
            hyper,
            state.kernel,
            table_label(self),
            step=step,
            rounding_seed=self._rounding_seed,
            row_stride=stride,
            row_offset=offset,
            trackers=[state.update_tracker(self).handle],
        )

    def slot_variables(self, optimizer: Optimizer, rule: RowRule) -> list[tf.Variable]:
        state = optimizer_state(optimizer, rule)
        if state is None:
            raise ValueError(f"'{table_label(self)}': optimizer slots need an optimizer")
        return state.slots(self)

    def checkpoint_meta(self) -> dict[str, object]:
        shape = self.global_shape
        return {
            "kind": self.checkpoint_kind,
            "mode": self.mode,
            "global_shape": shape.as_list(),
            "dim": int(shape[1]),
        }

    def checkpoint_chunks(
        self, optimizer: Optimizer | None, since_step: int | None, chunk_rows: int
    ) -> Iterator[tuple[IdArray, RowArray]]:
        state = optimizer_state(optimizer)
        slots = [] if state is None else state.saved_slots(self)
        if since_step is None:
            # Every row, a range of local rows at a time: no list of every id is made.
            communicator = comm.current()
            total = int(self.shape[0])
            for start in range(0, total, chunk_rows):
                idx = tf.range(start, min(start + chunk_rows, total), dtype=tf.int64)
                ids = idx
                if self._placement.kind == "distributed":
                    ids = global_row(idx, communicator.rank, communicator.num_ranks)
                yield ids.numpy(), self._saved_rows(idx, slots)
            return
        if state is None:
            raise ValueError(
                f"'{table_label(self)}': the rows changed since a step need the optimizer"
            )
        selected = state.changed_rows(self, since_step)
        held = self.held_ids().numpy()
        total = int(selected.shape[0])
        for start in range(0, total, chunk_rows):
            idx = selected[start : start + chunk_rows]
            yield held[idx.numpy()], self._saved_rows(idx, slots)

    def _saved_rows(self, idx: tf.Tensor, slots: Sequence[tf.Variable]) -> RowArray:
        """The local rows `idx`, value then each slot, as a checkpoint stores them."""
        # 16-bit values widen exactly to the float32 of their slots.
        parts = [tf.cast(self.sparse_read(idx), row_dtype(self.dtype))]
        parts += [tf.cast(s.sparse_read(idx), parts[0].dtype) for s in slots]  # bf16: exact
        return np.concatenate([p.numpy() for p in parts], axis=1)

    def checkpoint_stage(
        self,
        pieces: Iterable[tuple[IdArray, RowArray]],
        optimizer: Optimizer | None,
        step: int | None,
    ) -> StagedRows:
        """The rows to assign, in local order; the variable and its slots change only when the
        result's commit() assigns them."""
        # Every local row is given (checkpoint.load checks it), in local order.
        listed = list(pieces)
        ids = np.concatenate([i for i, _ in listed])
        rows = np.concatenate([r for _, r in listed])
        rows = rows[np.argsort(self.local_ids(ids, comm.current().num_ranks))]
        return _AssignedRows(self, rows, optimizer)

    def export_rows(self) -> tuple[tf.Tensor, tf.Tensor]:
        return self.held_ids(), tf.convert_to_tensor(self)

    def assign(
        self,
        value: tf.Tensor,
        use_locking: bool | None = None,
        name: str | None = None,
        read_value: bool = True,
    ) -> tf.Tensor | tf.Operation:
        value = check_value_range(value, self.dtype, table_label(self), "assigned value")
        value = tf.convert_to_tensor(value, dtype=self.dtype)
        if assigns_into_huge_pages(self, value):
            return assign_into_huge_pages(self, value, read_value)
        return super().assign(value, use_locking, name, read_value)

    def _restore_from_tensors(self, restored_tensors: dict[str, tf.Tensor]) -> tf.Operation:
        if assigns_into_huge_pages(self, value := restored_tensors[VARIABLE_VALUE_KEY]):
            return assign_into_huge_pages(self, value)
        return super()._restore_from_tensors(restored_tensors)

    def assign_rows(self, ids: tf.Tensor, values: tf.Tensor) -> None:
        values = check_value_range(values, self.dtype, table_label(self), "assigned value")
        keys = tf.cast(tf.reshape(tf.convert_to_tensor(ids), [-1]), tf.int64)
        values = tf.reshape(tf.cast(values, self.dtype), [-1, self.shape[1]])
        communicator = comm.current()
        label = table_label(self)
        checks = [
            tf.debugging.assert_less(
                keys, tf.constant(self.id_limit, tf.int64), f"'{label}': key past the table"
            ),
            tf.debugging.assert_non_negative(keys, f"'{label}': negative key"),
        ]
        if self._placement.kind == "distributed":
            owner, local = _row_owner(keys, communicator.num_ranks)
            checks.append(
                tf.debugging.assert_equal(
                    owner,
                    tf.fill(tf.shape(owner), tf.constant(communicator.rank, tf.int64)),
                    f"'{label}': a key of another rank (assign the rows each rank exported)",
                )
            )
        else:
            if communicator.rank != self._placement.rank:
                checks.append(
                    tf.debugging.assert_equal(
                        tf.size(keys), 0, f"'{label}': rows of a table held by another rank"
                    )
                )
            local = keys
        with tf.control_dependencies(checks):
            self.scatter_update(tf.IndexedSlices(values, local))

    def serving_layout(self) -> ServingLayout:
        rows, dim = self.global_shape.as_list()
        return ServingLayout(self.dtype, int(dim), int(rows))


class _AssignedRows(StagedRows):
    """A static table's loaded rows (value, then each slot), assigned by commit(); undo()
    assigns back what commit() replaced."""

    def __init__(self, table: Variable, rows: RowArray, optimizer: Optimizer | None) -> None:
        self._table, self._rows, self._optimizer = table, rows, optimizer
        self._replaced: list[tuple[tf.Variable, tf.Tensor]] = []

    def _targets(self) -> list[tuple[tf.Variable, slice]]:
        """(variable, columns of the rows) pairs: the table, then the variables of each slot
        (OptimizerState.restored_slots)."""
        dim = int(self._table.shape[1])
        targets = [(self._table, slice(0, dim))]
        state = optimizer_state(self._optimizer)
        if state is None:
            return targets
        for i, variables in enumerate(state.restored_slots(self._table)):
            columns = slice(dim * (i + 1), dim * (i + 2))
            targets += [(v, columns) for v in variables]
        return targets

    def commit(self) -> None:
        for variable, columns in self._targets():
            # A float32 dump into 16 bits (values or slots) rounds to nearest.
            value = tf.cast(self._rows[:, columns], variable.dtype)
            self._replaced.append((variable, tf.identity(variable)))
            variable.assign(value)

    def undo(self) -> None:
        for variable, old in reversed(self._replaced):
            variable.assign(old)
        self._replaced = []
