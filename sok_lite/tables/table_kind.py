"""TableKind: what lookups, optimizers, checkpoints and serving ask of a table.

sok_lite.Variable (rows in a tf.Variable, row i on rank i % N) and sok_lite.DynamicVariable (a
hash table, key k on the rank its hash selects) both implement it; the modules that use
tables ask these questions instead of testing the table's class, so that a new kind of table
(a disk-backed one, say) is one new class.

Where the rows of a distributed row-numbered table live is stated once for Python in
sok_lite.tables.key_hash, as the kernels state it in kernels/core/cpu_gpu_rules.h.
"""

import abc
import dataclasses
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import tensorflow as tf

from sok_lite.tables.key_hash import local_row, row_owner


def _row_owner(ids, num_ranks: int):
    """(owner rank, local row) of global row ids of a distributed table (tables.key_hash)."""
    return row_owner(ids, num_ranks), local_row(ids, num_ranks)


class TableKind(abc.ABC):
    """The questions every kind of sok_lite table answers, whatever stores its rows.

    (tf.Variable's metaclass derives from ABCMeta, so a table class may be both.)

    A table holds this rank's rows only; `placement` says which rank holds which id, and the
    methods below turn that into routing, reads, row-wise updates, checkpoint chunks and
    serving copies. Ids are global: row numbers for a row-numbered table (`keyed` False),
    arbitrary integer keys for a keyed one.
    """

    # Whether ids are arbitrary keys (rows created on first lookup) rather than row numbers.
    keyed: bool = False
    # The "kind" a checkpoint manifest records for the table.
    checkpoint_kind: str = ""
    # The kernel that applies row-wise updates, as error messages name it.
    apply_op: str = ""

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
    def id_dtypes(self) -> tuple:
        """The dtypes of ids that a lookup accepts."""

    @abc.abstractmethod
    def owners(self, ids: np.ndarray, num_ranks: int) -> np.ndarray:
        """The rank that holds each global id, with `num_ranks` ranks."""

    @abc.abstractmethod
    def local_ids(self, ids, num_ranks: int):
        """Where this rank stores global ids it owns: local rows, or the keys themselves."""

    # --- reading and updating rows on this rank ---------------------------------------------

    @staticmethod
    @abc.abstractmethod
    def read_local(tables: Sequence, ids: Sequence, labels: Sequence) -> list:
        """The rows [n, dim] of local ids, per table, for tables of this kind and one dtype.

        A static method so that a kind reads a group of tables in one op.
        """

    def combines_in_place(self, num_ranks: int) -> bool:
        """Whether `lookup_combine` reads and combines this table's ids in one op (no
        deduplication first)."""
        return False

    def lookup_combine(self, ids, splits, weights, combiner: str, hotness: int, label: str):
        """Reads and combines per-sample rows in one op, where `combines_in_place`."""
        raise NotImplementedError(f"{type(self).__name__} combines rows after the lookup")

    @abc.abstractmethod
    def gradient_rows(self, values, indices) -> tf.IndexedSlices:
        """A gradient over local ids as the tf.IndexedSlices that `apply_rows` takes."""

    @abc.abstractmethod
    def apply_rows(self, optimizer, rule, grad: tf.IndexedSlices, hyper, step) -> None:
        """Applies one row-wise optimizer step to the rows of `grad` (and their slots).

        rule: the optimizer's sok_lite.optim.optimizer_rules.Rule; hyper: its hyper-parameters as
        the kernels take them; step: the int64 step being applied.
        """

    @abc.abstractmethod
    def slot_variables(self, optimizer, rule) -> list | None:
        """The optimizer's slot variables for this table, created if needed; None when the
        table keeps slots beside its rows."""

    def slot_variable(self, local_value, name: str):
        """A non-trainable variable placed like this table's rows, holding `local_value`: one
        optimizer slot, for kinds whose `slot_variables` are variables of their own."""
        raise NotImplementedError(f"{type(self).__name__} keeps optimizer slots beside its rows")

    # --- checkpoints, SOK's export/assign and serving ---------------------------------------

    @abc.abstractmethod
    def checkpoint_meta(self) -> dict:
        """What a checkpoint manifest records of the table besides its name, dtype and slots:
        at least "kind" and "dim"."""

    @abc.abstractmethod
    def checkpoint_chunks(
        self, optimizer, since_step: int | None, chunk_rows: int
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """This rank's (global ids [n], rows [n, dim * (1 + slots)]), at most chunk_rows at a
        time; with since_step, only rows that optimizer steps after it changed."""

    @abc.abstractmethod
    def checkpoint_stage(self, pieces: Iterable[tuple[np.ndarray, np.ndarray]], optimizer, step):
        """A sok_lite.tables.staging.StagedRows whose commit() replaces this rank's rows by those of
        `pieces`, (global ids [n], rows [n, dim * (1 + slots)]) this rank owns, value then each
        slot when an optimizer is given; nothing changes before commit(). A keyed table stores
        the pieces as they come (a later row of a key replaces an earlier one) without holding
        them all; a row-numbered one gets every local row. step: the optimizer step the rows
        count as changed at (None: unknown)."""

    def checkpoint_restore(
        self, pieces: Iterable[tuple[np.ndarray, np.ndarray]], optimizer, step
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
    def assign_rows(self, ids, values) -> None:
        """Stores values for ids this rank holds, as SOK's sok.assign."""

    @abc.abstractmethod
    def serving_copy(self) -> "ServingRows":
        """The whole table as plain TF resources (gathered from every rank), which
        sok_lite.io.serving turns into the exported table."""


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


def ram_only(rows: int, bytes_ram: int) -> dict:
    """memory_stats() of a table held wholly in RAM that keeps no lookup counters."""
    stats = dict.fromkeys(MEMORY_STATS, 0)
    stats.update(rows_ram=rows, bytes_ram=bytes_ram, ram_budget=None)
    return stats


@dataclasses.dataclass(frozen=True)
class ServingRows:
    """A table's serving_copy(): every row as a tf.Variable and, for a hash table, the int64
    key of each row and the per-key initializer of unseen keys (None for a row-numbered table)."""

    rows: tf.Variable
    keys: tf.Tensor | None = None
    init: object = None
