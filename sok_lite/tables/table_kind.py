"""TableKind: what lookups, optimizers, checkpoints and serving ask of a table.

sok_lite.Variable (rows in a tf.Variable, row i on rank i % N) and sok_lite.DynamicVariable (a
hash table, key k on the rank its hash selects) both implement it; the modules that use
tables ask these questions instead of testing the table's class, so that a new kind of table
(a disk-backed one, say) is one new class.

Where the rows of a distributed static table live is stated once for Python in
sok_lite.tables.key_hash, as the kernels state it in kernels/core/cpu_gpu_rules.h.

The optimizer side of a row-wise update is typed here too, as Protocols (RowRule,
HyperParameters), so that tables name what they ask of an optimizer's rule without importing
the optimizers. What a table asks of the optimizer itself (its kernel, slot fills, slot
variables and changed rows) is OptimizerState, which sok_lite.optim registers here
(`register_optimizer_state`) and tables get from `optimizer_state(optimizer)`.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import numpy as np
import numpy.typing as npt
import tensorflow as tf

from sok_lite.tables.key_hash import local_row, row_owner

if TYPE_CHECKING:
    from sok_lite.tables.initializers import RowInitializer
    from sok_lite.tables.staging import StagedRows

# A Keras 3, tf_keras or tf_keras legacy optimizer (or sok_lite's wrapper of one): they share no
# typed base class, and the rules read attributes particular to each optimizer class.
Optimizer: TypeAlias = Any  # type escape: three optimizer hierarchies, no common typed base

# Global or local ids, and a table's rows, as NumPy arrays (checkpoint pieces, routing).
IdArray: TypeAlias = npt.NDArray[np.int64]
RowArray: TypeAlias = npt.NDArray[np.floating]
# A table's memory_stats(): the MEMORY_STATS fields; ram_budget is None without a disk tier.
MemoryStats: TypeAlias = dict[str, int | None]


class HyperParameters(Protocol):
    """The hyper-parameters of an optimizer's rule for the step being applied: called with the
    optimizer, it gives the kernel's parameters after learning rate and weight decay (float64
    scalars, in the kernel's order)."""

    def __call__(self, optimizer: Optimizer, /) -> list[tf.Tensor]: ...


class RowRule(Protocol):
    """What a table's row-wise update asks of an optimizer's rule
    (sok_lite.optim.optimizer_rules.Rule implements it)."""

    @property
    def kind(self) -> str:
        """The row-wise kernel (kernels/core/optimizer.h)."""

    @property
    def slots(self) -> tuple[tuple[str, float], ...]:
        """(slot name, initial value) per optimizer slot, in kernel order."""

    @property
    def params(self) -> HyperParameters:
        """The kernel's parameters after learning rate and weight decay."""

    @property
    def keras_slots(self) -> tuple[str, ...]:
        """Where the optimizer keeps its own state of each slot, slot for slot."""


def _row_owner(ids: tf.Tensor | IdArray, num_ranks: int) -> tuple[tf.Tensor, tf.Tensor]:
    """(owner rank, local row) of global row ids of a distributed table (tables.key_hash), as
    tensors or arrays, as the ids are."""
    return row_owner(ids, num_ranks), local_row(ids, num_ranks)


class TableKind(abc.ABC):
    """The questions every kind of sok_lite table answers, whatever stores its rows.

    (tf.Variable's metaclass derives from ABCMeta, so a table class may be both.)

    A table holds this rank's rows only; `placement` says which rank holds which id, and the
    methods below turn that into routing, reads, row-wise updates, checkpoint chunks and
    serving copies. Ids are global: row numbers for a static table (`kind` "static"),
    arbitrary integer keys for a hash table (`kind` "hash").
    """

    # "static" (ids are row numbers) or "hash" (ids are arbitrary keys, rows created on first
    # lookup): the two kinds of sok_lite.tables.TABLE_KINDS.
    kind: str = "static"
    # The "kind" a checkpoint manifest records for the table.
    checkpoint_kind: str = ""
    # The kernel that applies row-wise updates, as error messages name it.
    apply_op: str = ""
    # Every table is also a variable; its variable base class defines these.
    name: str
    dtype: tf.DType
    shape: tf.TensorShape
    handle: tf.Tensor
    ref: Callable[[], object]
    # This rank's rows, bytes and lookup counters: the MEMORY_STATS fields (each kind's own).
    memory_stats: Callable[[], MemoryStats]

    # --- where ids live ---------------------------------------------------------------------

    @property
    @abc.abstractmethod
    def id_limit(self) -> int:
        """The number of valid ids (global rows); -1 when any key is valid."""

    @property
    @abc.abstractmethod
    def owner_code(self) -> int:
        """How the exchange op finds the owner of an id: OWNER_BY_ROW, OWNER_BY_HASH, or the
        rank K that holds every id."""

    @property
    @abc.abstractmethod
    def id_dtypes(self) -> tuple[tf.DType, ...]:
        """The dtypes of ids that a lookup accepts."""

    @abc.abstractmethod
    def owners(self, ids: IdArray, num_ranks: int) -> IdArray:
        """The rank that holds each global id, with `num_ranks` ranks."""

    @abc.abstractmethod
    def local_ids(self, ids: tf.Tensor, num_ranks: int) -> tf.Tensor:
        """Where this rank stores global ids it owns: local rows, or the keys themselves."""

    # --- reading and updating rows on this rank ---------------------------------------------

    @staticmethod
    @abc.abstractmethod
    def read_local(
        tables: Sequence[TableKind], ids: Sequence[tf.Tensor], labels: Sequence[str]
    ) -> list[tf.Tensor]:
        """The rows [n, dim] of local ids, per table, for tables of this kind and one dtype.

        A static method so that a kind reads a group of tables in one op.
        """

    def combines_in_place(self, num_ranks: int) -> bool:
        """Whether `lookup_combine` reads and combines this table's ids in one op (no
        deduplication first)."""
        return False

    def lookup_combine(
        self,
        ids: tf.Tensor,
        splits: tf.Tensor,
        weights: tf.Tensor | None,
        combiner: str,
        hotness: int,
        label: str,
    ) -> tf.Tensor:
        """Reads and combines per-sample rows in one op, where `combines_in_place`."""
        raise NotImplementedError(f"{type(self).__name__} combines rows after the lookup")

    @abc.abstractmethod
    def gradient_rows(self, values: tf.Tensor, indices: tf.Tensor) -> tf.IndexedSlices:
        """A gradient over local ids as the tf.IndexedSlices that `apply_rows` takes."""

    @abc.abstractmethod
    def apply_rows(
        self,
        optimizer: Optimizer,
        rule: RowRule,
        grad: tf.IndexedSlices,
        hyper: tf.Tensor,
        step: tf.Tensor,
    ) -> None:
        """Applies one row-wise optimizer step to the rows of `grad` (and their slots).

        optimizer, rule: the optimizer and its rule, which the table hands back to
        `optimizer_state` for the kernel and the slots; hyper: float64 [2 + n], the learning
        rate, the weight decay, then the rule's `params` of this step, as the kernels take
        them; step: the int64 step being applied.
        """

    @abc.abstractmethod
    def slot_variables(self, optimizer: Optimizer, rule: RowRule) -> list[tf.Variable] | None:
        """The optimizer's slot variables for this table, created if needed; None when the
        table keeps slots beside its rows."""

    def slot_variable(self, local_value: tf.Tensor, name: str) -> tf.Variable:
        """A non-trainable variable placed like this table's rows, holding `local_value`: one
        optimizer slot, for kinds whose `slot_variables` are variables of their own."""
        raise NotImplementedError(f"{type(self).__name__} keeps optimizer slots beside its rows")

    # --- checkpoints, SOK's export/assign and serving ---------------------------------------

    @abc.abstractmethod
    def checkpoint_meta(self) -> dict[str, object]:
        """What a checkpoint manifest records of the table besides its name, dtype and slots:
        at least "kind" and "dim"."""

    @abc.abstractmethod
    def checkpoint_chunks(
        self, optimizer: Optimizer | None, since_step: int | None, chunk_rows: int
    ) -> Iterator[tuple[IdArray, RowArray]]:
        """This rank's (global ids [n], rows [n, dim * (1 + slots)]), at most chunk_rows at a
        time; with since_step, only rows that optimizer steps after it changed."""

    @abc.abstractmethod
    def checkpoint_stage(
        self,
        pieces: Iterable[tuple[IdArray, RowArray]],
        optimizer: Optimizer | None,
        step: int | None,
    ) -> StagedRows:
        """A sok_lite.tables.staging.StagedRows whose commit() replaces this rank's rows by those of
        `pieces`, (global ids [n], rows [n, dim * (1 + slots)]) this rank owns, value then each
        slot when an optimizer is given; nothing changes before commit(). A hash table stores
        the pieces as they come (a later row of a key replaces an earlier one) without holding
        them all; a static one gets every local row. step: the optimizer step the rows
        count as changed at (None: unknown)."""

    def checkpoint_restore(
        self,
        pieces: Iterable[tuple[IdArray, RowArray]],
        optimizer: Optimizer | None,
        step: int | None,
    ) -> None:
        """checkpoint_stage, then its commit."""
        staged = self.checkpoint_stage(pieces, optimizer, step)
        try:
            staged.commit()
        finally:
            staged.discard()

    @abc.abstractmethod
    def export_rows(self) -> tuple[tf.Tensor, tf.Tensor]:
        """This rank's (ids [n], values [n, dim]), as SOK's sok.export."""

    @abc.abstractmethod
    def assign_rows(self, ids: tf.Tensor, values: tf.Tensor) -> None:
        """Stores values for ids this rank holds, as SOK's sok.assign."""

    @abc.abstractmethod
    def serving_layout(self) -> ServingLayout:
        """What sok_lite.io.serving needs to lay the exported table out before it streams the
        rows (checkpoint_chunks) into the SavedModel: dtype, dim, row count over all ranks and,
        for a hash table, its initializer. A hash table counts its rows on every rank: every
        rank must call it."""


# --- what a table asks of the optimizer that steps it ------------------------------------


class OptimizerState(abc.ABC):
    """An optimizer as a table sees it: the kernel and slot fills of its row-wise update, the
    slot variables it keeps for a table whose slots are variables of their own, and which rows
    its steps changed.

    sok_lite.optim implements it and registers it with `register_optimizer_state`; a table
    asks `optimizer_state(optimizer)` and knows no optimizer class, rule or Keras slot.
    """

    @property
    @abc.abstractmethod
    def kernel(self) -> str:
        """The row-wise kernel that applies a step (kernels/core/optimizer.h)."""

    @property
    @abc.abstractmethod
    def slot_fills(self) -> list[float]:
        """The initial value of each optimizer slot, in kernel order."""

    @abc.abstractmethod
    def slots(self, table: TableKind) -> list[tf.Variable]:
        """The slot variables of a table whose slots are variables of their own (each made by
        its `slot_variable`), in kernel order, created on first use."""

    @abc.abstractmethod
    def update_tracker(self, table: TableKind) -> tf.Variable:
        """The int64 variable, one entry per local row of such a table, that the row-wise
        update sets to the step changing the row (created on first use)."""

    @abc.abstractmethod
    def changed_rows(self, table: TableKind, since_step: int) -> tf.Tensor:
        """The local rows of such a table that steps after `since_step` changed (int64).

        Raises:
          ValueError: where they are not known (a table the optimizer applied by itself).
        """

    @abc.abstractmethod
    def saved_slots(self, table: TableKind) -> list[tf.Variable]:
        """The variables that hold such a table's optimizer state now, in kernel order: what
        a dump writes."""

    @abc.abstractmethod
    def restored_slots(self, table: TableKind) -> list[list[tf.Variable]]:
        """Per slot, in kernel order, the variables a load of such a table assigns."""


# optimizer, its rule or None -> its OptimizerState: sok_lite.optim's, registered on import.
_state_of: Callable[[Optimizer, RowRule | None], OptimizerState] | None = None


def register_optimizer_state(
    state_of: Callable[[Optimizer, RowRule | None], OptimizerState],
) -> None:
    """Sets how tables get an optimizer's OptimizerState: state_of(optimizer, rule), with the
    optimizer's rule when the caller has it, else None."""
    global _state_of
    _state_of = state_of


def optimizer_state(
    optimizer: Optimizer | None, rule: RowRule | None = None
) -> OptimizerState | None:
    """The OptimizerState of `optimizer` (None without an optimizer).

    rule: the optimizer's rule, where the caller has it (a row-wise step), else looked up.
    """
    if optimizer is None:
        return None
    if _state_of is None:
        raise RuntimeError("no optimizer state is registered: import sok_lite first")
    return _state_of(optimizer, rule)


# The fields of a table's memory_stats(), shared by both table kinds and memory_report.
# In the order of SokLiteDynamicMemoryStats' output.
MEMORY_STATS = (
    "rows_ram",
    "rows_disk",
    "bytes_ram",
    "bytes_disk",
    "ram_budget",
    "hits",
    "misses",
    "spills",
    "evictions",
)


def ram_only(rows: int, bytes_ram: int) -> MemoryStats:
    """memory_stats() of a table held wholly in RAM that keeps no lookup counters."""
    stats: MemoryStats = dict.fromkeys(MEMORY_STATS, 0)
    stats.update(rows_ram=rows, bytes_ram=bytes_ram, ram_budget=None)
    return stats


@dataclasses.dataclass(frozen=True)
class ServingLayout:
    """A table's serving_layout(): its storage dtype, dim and rows over all ranks and, for a
    hash table, the per-key initializer of unseen keys (None for a static table)."""

    dtype: tf.DType
    dim: int
    rows: int
    init: RowInitializer | None = None

    @property
    def is_hash(self) -> bool:
        return self.init is not None
