"""Tables: the storage of embedding rows (sok.Variable, sok.DynamicVariable), the TableKind
interface lookups, optimizers, exporters and planners read them through, and what a table is
made of (placement, key hashing, dtypes, initializers, disk tiers, staged rows).

TableSpec, here, describes one table before it exists: sok.plan_memory plans for it, a Keras
feature's table is made from it, and its build() creates the table.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from sok_lite.tables.storage import Disk, disk_of

if TYPE_CHECKING:
    from sok_lite.comm.shards import ReplicaShards
    from sok_lite.tables.dynamic import DynamicTable
    from sok_lite.tables.variable import Variable

TABLE_KINDS = ("static", "hash")
# The fields of a TableSpec that only a hash table takes: sok.DynamicVariable's settings.
HASH_TABLE_FIELDS = ("capacity", "evict_policy", "min_count", "key_dtype", "storage")
# The classes TableSpec.build creates instead of the tables' own, per kind: sok_lite.compat
# registers sok.DynamicVariable (SOK's name and constructor over DynamicTable) for "hash".
_table_classes: dict[str, type[DynamicTable]] = {}


@runtime_checkable
class DescribesTable(Protocol):
    """What describes the table it reads (a sok_lite.keras.FeatureSpec, from a layer above)."""

    def table_spec(self) -> TableSpec: ...


def register_table_class(kind: str, table_class: type[DynamicTable]) -> None:
    """Makes TableSpec.build create `table_class` (a subclass of the tables' own class of that
    kind, from a higher layer) for tables of `kind`."""
    if kind not in TABLE_KINDS:
        raise ValueError(f"kind must be one of {TABLE_KINDS}, got {kind!r}")
    _table_classes[kind] = table_class


@dataclasses.dataclass
class TableSpec:
    """One table, described before it exists: a static table (sok.Variable) or a hash table
    (sok.DynamicVariable).

    sok.plan_memory plans for TableSpecs, the Keras layers make one per table of their features,
    and `build()` creates the table a spec describes. The names sok_lite.keras' features give
    four of the fields stay readable: input_dim, output_dim, storage_dtype and hashed.

    Attributes:
      rows: a static table's rows; a hash table's distinct keys expected over the job (None:
        unknown, for a hash table that is built and not planned).
      dim: the row width.
      kind: "static" (sok.Variable) or "hash" (sok.DynamicVariable).
      dtype: the storage dtype (float32, float64, bfloat16, float16; hash tables: float32,
        bfloat16, float16); None: the default of whoever creates the table (a Keras layer's
        variable dtype, else float32).
      name: the table's name, and its label in a plan.
      mode: "distributed" or "localized:K".
      capacity: a hash table's row bound over all ranks (None: unbounded).
      ram_budget: bytes (or "2GiB") a hash table may keep in RAM per rank with a disk tier
        (None: storage's, else all in RAM). It pays for the index of the rows on disk first
        (~8 bytes a key; 16-32 up to 32,768 keys), then for the rows in RAM.
      batch_keys: the distinct keys one batch looks up in the table, over all ranks (None:
        unknown); a tiered plan warns when RAM holds fewer rows than a rank's share of them.
      zipf: the exponent s of the ids' distribution, Zipf(s) over the table's `rows` keys
        (P(k-th most frequent key) ~ k^-s); with it a tiered plan predicts the RAM tier's hit
        rate (None: no prediction).
      key_counts: a measured histogram instead of zipf: counts per key, as a 1-D array or
        sequence, or a dict of key -> count (None: none). Plans only; not compared.
      initializer: the initial rows, as sok.Variable and sok.DynamicVariable take it (a Keras
        initializer, its name or config dict, a number, SOK's "random"); None: their default.
      evict_policy: a hash table's "lru" or "lfu", as sok.DynamicVariable.
      min_count: a hash table's admission count, as sok.DynamicVariable.
      key_dtype: a hash table's key dtype, "int64" or "int32".
      storage: a hash table's disk tier: None (every row in RAM) or
        sok.storage.Disk(path, ram_budget) (or a dict of its fields).

    >>> import sok_lite as sok
    >>> table = sok.TableSpec(100, 8, name="items").build()
    >>> type(table).__name__, table.global_shape.as_list()
    ('Variable', [100, 8])
    """

    rows: int | None
    dim: int
    kind: str = "static"
    dtype: object = "float32"
    name: str | None = None
    mode: str = "distributed"
    capacity: int | None = None
    ram_budget: object = None
    batch_keys: int | None = None
    initializer: object = None
    evict_policy: str = "lru"
    min_count: int = 1
    key_dtype: str = "int64"
    storage: Disk | None = None
    zipf: float | None = None
    # A histogram may be an array, whose == is elementwise: specs compare without it.
    key_counts: object = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        # A config dict becomes a Disk, so that specs of one table compare equal.
        self.storage = disk_of(self.storage, f"table {self.name!r}")

    @classmethod
    def of(cls, spec: object, name: str | None = None) -> TableSpec:
        """A TableSpec from itself, from a dict of its fields, or from an object that describes
        the table it reads (a sok_lite.keras.FeatureSpec, by its `table_spec()`).

        Args:
          spec: a TableSpec, a dict of its fields, or an object with a `table_spec()` method.
          name: the table's name instead of the spec's own (None: the spec's).

        Raises:
          ValueError: for anything else.
        """
        if isinstance(spec, DescribesTable):
            spec = spec.table_spec()
        elif isinstance(spec, dict):
            spec = cls(**spec)
        if not isinstance(spec, cls):
            raise ValueError(f"a table spec is a TableSpec or a dict, got {spec!r}")
        return spec if name is None else dataclasses.replace(spec, name=name)

    @property
    def hashed(self) -> bool:
        """Whether the spec describes a hash table (kind "hash")."""
        return self.kind == "hash"

    @property
    def input_dim(self) -> int | None:
        """rows, as a Keras feature names them: None for a hash table."""
        return None if self.hashed else self.rows

    @property
    def output_dim(self) -> int:
        """dim, as a Keras feature names it."""
        return self.dim

    @property
    def storage_dtype(self) -> object:
        """dtype, as a Keras feature names it."""
        return self.dtype

    @property
    def planned_ram_budget(self) -> object:
        """The RAM budget a plan holds the table to: ram_budget, else storage's (None: none)."""
        if self.ram_budget is not None or self.storage is None:
            return self.ram_budget
        return self.storage.ram_budget

    def build(self, trainable: bool = True) -> Variable | DynamicTable | ReplicaShards:
        """Creates the table: a sok.Variable of [rows, dim] for kind "static", a
        sok.DynamicVariable of width dim for kind "hash" (rows, ram_budget, batch_keys,
        zipf and key_counts only plan it; storage gives it its disk tier).

        Args:
          trainable: whether optimizers train the table.

        Returns:
          The new table (a sok_lite.comm.shards.ReplicaShards of them where the process runs
          several replicas, as the constructors return): a sok.DynamicVariable once
          sok_lite.compat registered it (importing sok_lite does), else the tables'
          DynamicTable.

        Raises:
          ValueError: an unknown kind, or what the table's constructor refuses (naming the
            table).
        """
        import keras

        # The table classes import what tables are made of: this package comes first.
        from sok_lite.tables.dynamic import DynamicTable
        from sok_lite.tables.variable import Variable

        if self.kind not in TABLE_KINDS:
            raise ValueError(f"table {self.name!r}: kind must be one of {TABLE_KINDS}")
        initializer = self.initializer
        if isinstance(initializer, dict) or (isinstance(initializer, str) and not self.hashed):
            # A hash table reads SOK's strings ("random", "13") too: it gets names as they are.
            initializer = keras.initializers.get(initializer)
        dtype = self.dtype or "float32"
        if self.kind == "static":
            return Variable(
                shape=[self.rows, self.dim],
                initializer=initializer,
                trainable=trainable,
                dtype=dtype,
                mode=self.mode,
                name=self.name,
            )
        hash_table_class = _table_classes.get("hash", DynamicTable)
        return hash_table_class(
            self.dim,
            initializer=initializer,
            trainable=trainable,
            dtype=dtype,
            mode=self.mode,
            name=self.name,
            capacity=self.capacity,
            evict_policy=self.evict_policy,
            min_count=self.min_count,
            key_dtype=self.key_dtype,
            storage=self.storage,
        )
