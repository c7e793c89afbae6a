"""DynamicTable, the storage of sok_lite.DynamicVariable: a hash-table embedding whose rows are
created on first lookup. It takes sok_lite's own arguments; SOK's constructor and names are
added above it, in sok_lite.compat.sok2_dynamic."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import NoReturn

import tensorflow as tf

from sok_lite import comm
from sok_lite._errors import table_label
from sok_lite._tf_internals import BaseResourceVariable, variable_accessed
from sok_lite.comm.shards import create_shards
from sok_lite.comm.strategy import StrategyCommunicator
from sok_lite.ops import hash_table_ops
from sok_lite.tables.dynamic_config import (
    DYNAMIC_DTYPES,
    CreateArgs,
    _host_device,
    _initializer_spec,
    _table_ids,
    positive_int,
)
from sok_lite.tables.dynamic_rows import DynamicRows
from sok_lite.tables.initializers import RowInitializer
from sok_lite.tables.placement import PlacedTable, Placement
from sok_lite.tables.storage import Disk, release_when_deleted, table_dir
from sok_lite.tables.table_dtypes import (
    HALF_DTYPES,
    check_table_dtype,
    rounding_seed,
)
from sok_lite.tables.table_kind import MEMORY_STATS, MemoryStats, TableKind, ram_only

# With several ranks, sparse_read exchanges keys with their owners: lookup_sparse's work, which
# sok_lite.lookup.sparse registers here (a table does not import the lookups above it).
_multi_rank_read: Callable[[DynamicTable, tf.Tensor], tf.Tensor] | None = None


def register_multi_rank_read(read: Callable[[DynamicTable, tf.Tensor], tf.Tensor]) -> None:
    """Sets read(table, ids [n, 1]) -> rows [n, dim], the lookup of one key per sample."""
    global _multi_rank_read
    _multi_rank_read = read


class DynamicTable(PlacedTable, DynamicRows, BaseResourceVariable, TableKind):
    """An embedding table keyed by arbitrary int64 (or int32) ids, grown as keys appear: the
    storage behind sok_lite.DynamicVariable, whose docstring documents what it does.

    It takes sok_lite's own arguments only, all but the first two as keywords; SOK's
    constructor and names are added above it (sok_lite.compat.sok2_dynamic).

    Args:
      dimension, initializer, name, trainable, dtype, mode, key_dtype, capacity,
        evict_policy, min_count, storage: as sok_lite.DynamicVariable's.
    """

    def __new__(cls, *args: object, **kwargs: object) -> DynamicTable:
        communicator = comm.current()
        if not isinstance(communicator, StrategyCommunicator) or communicator.shards_per_table == 1:
            table: DynamicTable = super().__new__(cls)
            return comm.register_table(table)
        # The default seed is taken once for the table: every shard initializes keys alike.
        listed = list(args)
        if len(listed) > 1:
            listed[1] = _initializer_spec(listed[1])
        else:
            kwargs["initializer"] = _initializer_spec(kwargs.get("initializer"))
        # The arguments go to the constructor as given (__init__ checks them).
        make: Callable[..., DynamicTable] = cls
        # type escape: under a multi-replica strategy the constructor returns the table's
        # ReplicaShards, which stands for the running replica's shard
        return create_shards(lambda: make(*listed, **kwargs), communicator)  # type: ignore[return-value]

    def __init__(
        self,
        dimension: int,
        initializer: object = None,
        *,
        name: str | None = None,
        trainable: bool = True,
        dtype: tf.DType | str = tf.float32,
        mode: str = "distributed",
        key_dtype: tf.DType | str = tf.int64,
        capacity: int | None = None,
        evict_policy: str = "lru",
        min_count: int = 1,
        storage: Disk | None = None,
    ) -> None:
        dimension = positive_int(dimension, "DynamicVariable dimension")
        key_dtype = tf.as_dtype(key_dtype)
        if key_dtype not in (tf.int32, tf.int64):
            raise ValueError(f"key_dtype must be int32 or int64, got {key_dtype.name}")
        dtype = check_table_dtype(dtype, name)
        if dtype not in DYNAMIC_DTYPES:
            raise ValueError(
                f"table '{name or 'DynamicVariable'}': a DynamicVariable stores float32, "
                f"bfloat16 or float16 rows, got {dtype.name}"
            )
        placement = Placement.parse(mode)
        num_ranks = comm.current().num_ranks
        if placement.kind == "localized" and placement.rank >= num_ranks:
            raise ValueError(f"mode {mode!r} names rank {placement.rank} of {num_ranks}")
        if evict_policy not in ("lru", "lfu"):
            raise ValueError(f"evict_policy must be 'lru' or 'lfu', got {evict_policy!r}")
        holders = num_ranks if placement.kind == "distributed" else 1
        capacity, per_rank = self._capacity_of(capacity, holders)
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        init = _initializer_spec(initializer)
        if not isinstance(init, RowInitializer):
            raise ValueError(
                f"initializer {initializer!r} cannot be computed per key; use a Keras "
                "RandomNormal, TruncatedNormal, RandomUniform, Zeros, Ones or Constant, a "
                'number, or "random"'
            )
        name = name or "DynamicVariable"
        tier_path, ram_budget = self._storage_of(storage, name, capacity)
        shared_name = f"sok_lite_dynamic_{name}_{next(_table_ids)}"
        # The GPU table has no capacity eviction, admission, 16-bit storage or disk tier: such
        # a table stays on the CPU.
        cpu_only = per_rank > 0 or min_count > 1 or dtype in HALF_DTYPES or bool(tier_path)
        # From the name every rank gives the table: the same draws on any rank.
        seed = rounding_seed(name, [None, dimension])
        # Kept to create a staging table configured alike (checkpoint loads swap one in).
        create_args: CreateArgs = dict(
            dim=dimension,
            init=init,
            capacity=per_rank,
            policy=evict_policy,
            min_count=min_count,
            ram_budget=ram_budget,
            storage_dtype=dtype,
            rounding_seed=seed,
        )
        with tf.init_scope():
            with tf.device(_host_device()) if cpu_only else contextlib.nullcontext():
                handle = hash_table_ops.create_table(
                    shared_name, tier_path=tier_path, **create_args
                )
        super().__init__(
            trainable=trainable,
            shape=tf.TensorShape([None, dimension]),
            dtype=dtype,
            handle=handle,
            name=name,
            unique_id=shared_name,
            handle_name=name,
            in_graph_mode=False,
        )
        self._dimension = dimension
        self._create_args = create_args
        self._tier_path = tier_path
        if tier_path:
            release_when_deleted(self, tier_path, handle)
        self._rounding_seed = seed
        self._key_dtype = key_dtype
        self._capacity = capacity
        self._init = init
        self._placement = placement
        self._storage = storage

    @staticmethod
    def _storage_of(storage: object, name: str, capacity: int | None) -> tuple[str, int]:
        """(directory of this rank's disk tier or "", ram_budget or 0)."""
        if storage is None:
            return "", 0
        if not isinstance(storage, Disk):
            raise ValueError(
                f"DynamicVariable '{name}': storage must be None or sok.storage.Disk(path, "
                f"ram_budget), got {storage!r}"
            )
        if capacity is not None:
            raise ValueError(
                f"DynamicVariable '{name}': capacity drops rows and storage=Disk keeps them; "
                "give one of them"
            )
        return table_dir(storage, name, comm.current().rank), storage.ram_budget

    @staticmethod
    def _capacity_of(capacity: object, holders: int) -> tuple[int | None, int]:
        """(rows over all ranks or None, rows per rank or 0 for unbounded)."""
        if capacity is None:
            return None, 0
        capacity = positive_int(capacity, "capacity")
        return capacity, math.ceil(capacity / holders)

    @property
    def dimension(self) -> int:
        """The row width."""
        return self._dimension

    @property
    def key_dtype(self) -> tf.DType:
        """The dtype of the keys (tf.int64 or tf.int32)."""
        return self._key_dtype

    @property
    def capacity(self) -> int | None:
        """The rows the table may hold over all ranks; None when unbounded."""
        return self._capacity

    @property
    def rank_capacity(self) -> int | None:
        """The rows this rank's table may hold; None when unbounded."""
        return self._create_args["capacity"] or None

    @property
    def storage(self) -> Disk | None:
        """The sok.storage.Disk given at construction, or None (every row in RAM)."""
        return self._storage

    def memory_stats(self) -> MemoryStats:
        """This rank's rows and bytes in RAM and on disk and the table's counters.

        Returns:
          A dict of ints: rows_ram, rows_disk, bytes_ram, bytes_disk (the tier file's size),
          ram_budget (None when unbounded), hits (looked-up ids whose key was in RAM when the
          lookup began), misses (the other looked-up ids: read back from disk, created or not
          admitted yet; a repeated id counts each time, a failed lookup not at all, alike with
          or without a disk tier), spills (rows moved to disk) and evictions (rows deleted by
          capacity or evict()), the counters cumulative since creation. bytes_ram
          counts what the rows take (records, bookkeeping, indexes), allocated 1024 rows at a
          time.
        """
        if not self._on_host():  # the GPU table keeps no counters
            return ram_only(int(hash_table_ops.size(self.handle)), 0)
        values = [int(v) for v in hash_table_ops.memory_stats(self.handle).numpy()]
        stats: MemoryStats = dict(zip(MEMORY_STATS, values))
        budget = stats["ram_budget"]
        stats["ram_budget"] = None if budget is None or budget < 0 else budget
        return stats

    def _on_host(self) -> bool:
        return tf.DeviceSpec.from_string(self.handle.device).device_type in (None, "CPU")

    @property
    def initializer_spec(self) -> RowInitializer:
        """The per-key initializer (a sok_lite.tables.initializers.RowInitializer)."""
        return self._init

    def size(self) -> tf.Tensor:
        """The number of stored rows over all ranks, an int64 scalar. With several ranks every
        rank must call it (the count is summed over ranks)."""
        return comm.current().allreduce_sum(hash_table_ops.size(self.handle))

    def sparse_read(self, indices: tf.Tensor, name: str | None = None) -> tf.Tensor:
        """The rows of the keys `indices` (any shape): [*indices.shape, dimension].

        tf.gather(table, ids) and tf.nn.embedding_lookup(table, ids) call this. Missing rows are
        created (as by lookup_sparse); the gradient is a tf.IndexedSlices over the keys. With
        several ranks the keys are exchanged with their owners, so every rank must call it
        (as lookup_sparse).

        Args:
          indices: int32 or int64 keys (int64 keys need a table keyed by int64).
          name: the name scope of the ops.

        Raises:
          ValueError: keys that are not integers, or int64 keys for an int32 table.
        """
        keys = tf.convert_to_tensor(indices)
        if keys.dtype not in (tf.int32, tf.int64):
            raise ValueError(f"'{self._label}': keys must be int32 or int64, got {keys.dtype.name}")
        if keys.dtype == tf.int64 and self._key_dtype == tf.int32:
            raise ValueError(f"'{self._label}': keys must be int32 for this table, got int64")
        with tf.name_scope(name or "sok_lite_sparse_read"):
            flat = tf.reshape(keys, [-1])
            if comm.current().num_ranks == 1:
                variable_accessed(self)
                rows = hash_table_ops.lookup(
                    self.handle,
                    tf.cast(flat, tf.int64),
                    self._dimension,
                    f"hash table '{self._label}'",
                )
            else:
                if _multi_rank_read is None:
                    raise RuntimeError("no multi-rank read is registered: import sok_lite first")
                # One key per sample: the owners' rows, each "combined" alone.
                rows = _multi_rank_read(self, tf.expand_dims(flat, 1))
            out = tf.reshape(rows, tf.concat([tf.shape(keys), [self._dimension]], 0))
            return tf.ensure_shape(out, keys.shape.concatenate([self._dimension]))

    @property
    def _label(self) -> str:
        return table_label(self)

    def gather_nd(self, indices: tf.Tensor, name: str | None = None) -> NoReturn:
        """Not supported: a hash table is read by key, with tf.gather or lookup_sparse.

        Raises:
          NotImplementedError: always.
        """
        raise NotImplementedError(
            f"'{self._label}' is a DynamicVariable: read rows by key with tf.gather(table, "
            "keys), tf.nn.embedding_lookup or sok_lite.lookup_sparse"
        )

    def __repr__(self) -> str:
        return (
            f"<sok_lite.DynamicVariable '{self._label}' dimension={self._dimension} "
            f"mode={self.mode}>"
        )
