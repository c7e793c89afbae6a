"""sok_lite.DynamicVariable: a hash-table embedding whose rows are created on first lookup."""

import contextlib
import math

import tensorflow as tf

from sok_lite import comm
from sok_lite._tf_internals import BaseResourceVariable, variable_accessed
from sok_lite.comm.shards import create_shards
from sok_lite.ops import dynamic_ops
from sok_lite.tables.dynamic_config import (
    _HKV_EVICT,
    _HKV_HINTS,
    DYNAMIC_DTYPES,
    VAR_TYPES,
    TableSize,
    _host_device,
    _initializer_spec,
    _positive_int,
    _table_ids,
)
from sok_lite.tables.dynamic_rows import DynamicRows
from sok_lite.tables.initializers import RowInitializer
from sok_lite.tables.placement import Placement
from sok_lite.tables.storage import Disk, release_when_deleted, table_dir
from sok_lite.tables.table_dtypes import (
    HALF_DTYPES,
    check_table_dtype,
    rounding_seed,
)
from sok_lite.tables.table_kind import MEMORY_STATS, TableKind, ram_only

# With several ranks, sparse_read exchanges keys with their owners: lookup_sparse's work, which
# sok_lite.lookup.sparse registers here (a table does not import the lookups above it).
_multi_rank_read = None


def register_multi_rank_read(read) -> None:
    """Sets read(table, ids [n, 1]) -> rows [n, dim], the lookup of one key per sample."""
    global _multi_rank_read
    _multi_rank_read = read


class DynamicVariable(DynamicRows, BaseResourceVariable, TableKind):
    """An embedding table keyed by arbitrary int64 (or int32) ids, grown as keys appear.

    Memory follows the keys actually seen, not the key space: a row is created the first time
    its key is looked up, with a value that depends only on (key, seed, initializer), so the same
    key gets the same initial row on any number of ranks and in any arrival order. With mode
    "distributed", key k lives on the rank its hash selects; with "localized:K", every key lives
    on rank K. Optimizer slots live in the table beside each row.

    Rows are read with sok_lite.lookup_sparse, or with tf.nn.embedding_lookup(table, ids) and
    tf.gather(table, ids) (ids of any shape; the result is [*ids.shape, dimension]); both find or
    create the rows, and their gradient is a tf.IndexedSlices over the keys, which
    sok_lite.OptimizerWrapper and sok_lite.OptimizerScope apply row by row. A hash table has no
    dense value: value(), read_value() and converting the table to a tensor raise ValueError;
    tf.Variable's dense and scatter updates (assign_add, scatter_sub, ...) and gather_nd raise
    NotImplementedError.

    The positional order of the first nine arguments is SOK's, and SOK's keywords are accepted:
    code written for SOK's DynamicVariable runs unchanged.

    Args:
      dimension: the row width (> 0).
      initializer: a Keras initializer (name or object: RandomNormal, TruncatedNormal,
        RandomUniform, Zeros, Ones, Constant), a number (Python or NumPy scalar), or one of
        SOK's strings: a number such as "13" (a constant) or "random" (uniform in
        [-0.05, 0.05], as SOK's default "hbm" table). Default (None): "random_normal" (mean 0,
        stddev 0.05).
      var_type: SOK's backend, "hbm" (default) or "hybrid"; both are this hash table.
      name: the table name.
      constraint: must be None (a constraint cannot be applied to rows created on lookup).
      trainable: whether optimizers update it.
      key_type: SOK's name for key_dtype.
      dtype: the storage dtype of the values: tf.float32 (default), or tf.bfloat16 /
        tf.float16 to store them in 16 bits. Lookups, gradients and optimizer math are float32
        and optimizer slots stay float32; an optimizer step rounds the updated values back
        (bfloat16: stochastically, with bits drawn from the table's name, the step and the
        key, so the same on any number of ranks; float16: to nearest even). Initial and
        assigned values round to nearest even. 16-bit tables live in host memory.
      mode: "distributed" (default: each key on the rank its hash selects) or "localized:K"
        (every key on rank K).
      key_dtype: tf.int64 (default) or tf.int32 (or their names); every value of the type is a
        valid key.
      capacity: rows the table may hold over all ranks (None: unbounded). When full, a lookup
        first evicts the least recently used rows (or least frequently used with
        evict_policy="lfu") that the current lookup does not need. A bounded table lives in
        host memory.
      evict_policy: "lru" (default) or "lfu": which rows capacity evicts, or which rows a disk
        tier (storage) moves to disk.
      min_count: a key gets a stored, trainable row from its min_count-th lookup on; before
        that it reads the initializer's value and receives no update.
      storage: None (default: every row in RAM) or `sok.storage.Disk(path, ram_budget)`: each
        rank keeps at most ram_budget bytes of rows in RAM and the coldest rest (evict_policy) in
        a file under `<path>/<name>.rank<r>` (a cache, created empty; sok.dump saves both
        tiers). Rows move between the tiers with their slots, never lost; such a table lives in
        host memory and excludes capacity. See docs/user_guide.md, "Tables larger than memory".
      init_capacity: SOK's initial size of each rank's table; a sizing hint only (this table
        grows as needed).
      max_capacity: SOK's bound on the rows of each rank's table: capacity becomes
        max_capacity times the number of ranks holding rows (1 for "localized:K").
      **config: SOK's HierarchicalKV settings: evict_strategy ("kLru" or "kLfu", as
        evict_policy), filter_ratio (only 1.0; see min_count for admission), and
        max_hbm_for_vectors, max_bucket_size, max_load_factor, block_size, io_block_size,
        device_id and io_by_cpu, which are recorded in config_dict and have no effect.

    Raises:
      ValueError: a non-positive dimension, an unsupported key or value dtype, an initializer
        that cannot be computed per key, an unknown var_type or mode (or a rank not in the
        job), a constraint, conflicting key_type / key_dtype or capacity / max_capacity, bad
        policy settings, or a storage whose path cannot be written (naming table and path).
      TypeError: a keyword that neither sok_lite nor SOK defines.

    >>> import tensorflow as tf, sok_lite as sok
    >>> table = sok.DynamicVariable(4, initializer="ones")
    >>> out = sok.lookup_sparse(table, tf.ragged.constant([[2**40, -7]], dtype=tf.int64))
    >>> out.numpy().tolist(), int(table.size())
    ([[2.0, 2.0, 2.0, 2.0]], 2)
    >>> sok_style = sok.DynamicVariable(dimension=3, initializer="13", var_type="hbm")
    >>> tf.nn.embedding_lookup(sok_style, [0, 2**40]).numpy().tolist()
    [[13.0, 13.0, 13.0], [13.0, 13.0, 13.0]]
    >>> sok_style.size.numpy().tolist()
    [2, 3]

    Under a strategy whose process runs several replicas (MirroredStrategy), the constructor
    returns a sok_lite.comm.shards.ReplicaShards with one table per replica.
    """

    def __new__(cls, *args, **kwargs):
        communicator = comm.current()
        if communicator.shards_per_table == 1:
            return comm.register_table(super().__new__(cls))
        # The default seed is taken once for the table: every shard initializes keys alike.
        args = list(args)
        if len(args) > 1:
            args[1] = _initializer_spec(args[1])
        else:
            kwargs["initializer"] = _initializer_spec(kwargs.get("initializer"))
        return create_shards(lambda: cls(*args, **kwargs), communicator)

    def __init__(
        self,
        dimension: int,
        initializer=None,
        var_type: str | None = None,
        name: str | None = None,
        constraint=None,
        trainable: bool = True,
        key_type=None,
        dtype=None,
        mode: str | None = None,
        *,
        key_dtype=None,
        capacity: int | None = None,
        evict_policy: str | None = None,
        min_count: int = 1,
        storage=None,
        init_capacity: int | None = None,
        max_capacity: int | None = None,
        **config,
    ):
        dimension = _positive_int(dimension, "DynamicVariable dimension")
        var_type = "hbm" if var_type is None else var_type
        if var_type not in VAR_TYPES:
            raise ValueError(f"var_type must be one of {VAR_TYPES}, got {var_type!r}")
        if constraint is not None:
            raise ValueError("DynamicVariable does not support a constraint")
        key_dtype = self._key_dtype_of(key_type, key_dtype)
        dtype = check_table_dtype(tf.float32 if dtype is None else dtype, name)
        if dtype not in DYNAMIC_DTYPES:
            raise ValueError(
                f"table '{name or 'DynamicVariable'}': a DynamicVariable stores float32, "
                f"bfloat16 or float16 rows, got {dtype.name}"
            )
        placement = Placement.parse("distributed" if mode is None else mode)
        num_ranks = comm.current().num_ranks
        if placement.kind == "localized" and placement.rank >= num_ranks:
            raise ValueError(f"mode {mode!r} names rank {placement.rank} of {num_ranks}")
        evict_policy = self._sok_config(config, evict_policy)
        if evict_policy not in ("lru", "lfu"):
            raise ValueError(f"evict_policy must be 'lru' or 'lfu', got {evict_policy!r}")
        if init_capacity is not None:
            init_capacity = _positive_int(init_capacity, "init_capacity")
        holders = num_ranks if placement.kind == "distributed" else 1
        capacity, per_rank = self._capacity_of(capacity, max_capacity, holders)
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
        create_args = dict(
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
                handle = dynamic_ops.create_table(shared_name, tier_path=tier_path, **create_args)
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
        self._init_capacity = init_capacity
        self._init = init
        self._placement = placement
        self._var_type = var_type
        self._storage = storage
        self._config = dict(config)
        if init_capacity is not None:
            self._config["init_capacity"] = init_capacity
        if max_capacity is not None:
            self._config["max_capacity"] = max_capacity

    @staticmethod
    def _storage_of(storage, name: str, capacity) -> tuple:
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
    def _key_dtype_of(key_type, key_dtype) -> tf.DType:
        if key_type is not None and key_dtype is not None:
            if tf.as_dtype(key_type) != tf.as_dtype(key_dtype):
                raise ValueError(
                    f"key_type {tf.as_dtype(key_type).name} and key_dtype "
                    f"{tf.as_dtype(key_dtype).name} disagree; pass one of them"
                )
        chosen = key_dtype if key_dtype is not None else key_type
        chosen = tf.as_dtype(tf.int64 if chosen is None else chosen)
        if chosen not in (tf.int32, tf.int64):
            raise ValueError(f"key_dtype must be int32 or int64, got {chosen.name}")
        return chosen

    @staticmethod
    def _sok_config(config: dict, evict_policy: str | None) -> str:
        """Checks SOK's HierarchicalKV settings; returns the eviction policy."""
        unknown = sorted(set(config) - _HKV_HINTS - {"evict_strategy", "filter_ratio"})
        if unknown:
            raise TypeError(f"DynamicVariable got unexpected keyword arguments {unknown}")
        ratio = config.get("filter_ratio", 1.0)
        if ratio != 1.0:
            raise ValueError(
                f"filter_ratio={ratio} is not supported: give min_count=k to store a key from "
                "its k-th lookup on"
            )
        strategy = config.get("evict_strategy")
        if strategy is None:
            return "lru" if evict_policy is None else evict_policy
        if strategy not in _HKV_EVICT:
            raise ValueError(
                f"evict_strategy must be one of {sorted(_HKV_EVICT)}, got {strategy!r}"
            )
        if evict_policy is not None and evict_policy != _HKV_EVICT[strategy]:
            raise ValueError(
                f"evict_strategy {strategy!r} and evict_policy {evict_policy!r} disagree"
            )
        return _HKV_EVICT[strategy]

    @staticmethod
    def _capacity_of(capacity, max_capacity, holders: int) -> tuple:
        """(rows over all ranks or None, rows per rank or 0 for unbounded)."""
        if capacity is not None:
            capacity = _positive_int(capacity, "capacity")
        if max_capacity is not None:
            per_rank = _positive_int(max_capacity, "max_capacity")
            if capacity is not None and capacity != per_rank * holders:
                raise ValueError(
                    f"capacity {capacity} and max_capacity {per_rank} per rank disagree; "
                    "pass one of them"
                )
            return per_rank * holders, per_rank
        if capacity is None:
            return None, 0
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
    def key_type(self) -> tf.DType:
        """SOK's name for key_dtype."""
        return self._key_dtype

    @property
    def handle_dtype(self) -> tf.DType:
        """SOK's name for the value dtype (the storage dtype: float32, bfloat16 or float16)."""
        return self.dtype

    @property
    def mode(self) -> str:
        """ "distributed" (each key on the rank its hash selects) or "localized:K"."""
        return self._placement.mode

    @property
    def placement(self) -> Placement:
        """Where the keys live (kind "distributed": by hash; "localized": on rank `rank`)."""
        return self._placement

    @property
    def target_gpu(self) -> int:
        """As in SOK: K for mode "localized:K", -1 for "distributed"."""
        return self._placement.target_gpu

    @property
    def num_gpus(self) -> int:
        """As in SOK: the number of ranks of the job."""
        return comm.current().num_ranks

    @property
    def backend_type(self) -> str:
        """SOK's var_type given at construction ("hbm" or "hybrid"); both are this table."""
        return self._var_type

    @property
    def config_dict(self) -> dict:
        """SOK's table settings given at construction (init_capacity, max_capacity, ...)."""
        return dict(self._config)

    @property
    def capacity(self) -> int | None:
        """The rows the table may hold over all ranks; None when unbounded."""
        return self._capacity

    @property
    def rank_capacity(self) -> int | None:
        """The rows this rank's table may hold; None when unbounded."""
        return self._create_args["capacity"] or None

    @property
    def storage(self):
        """The sok.storage.Disk given at construction, or None (every row in RAM)."""
        return self._storage

    def memory_stats(self) -> dict:
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
            return ram_only(int(dynamic_ops.size(self.handle)), 0)
        values = [int(v) for v in dynamic_ops.memory_stats(self.handle).numpy()]
        stats = dict(zip(MEMORY_STATS, values))
        stats["ram_budget"] = None if stats["ram_budget"] < 0 else stats["ram_budget"]
        return stats

    def _on_host(self) -> bool:
        return tf.DeviceSpec.from_string(self.handle.device).device_type in (None, "CPU")

    @property
    def initializer_spec(self):
        """The per-key initializer (a sok_lite.tables.initializers.RowInitializer)."""
        return self._init

    @property
    def size(self) -> TableSize:
        """The number of stored rows over all ranks.

        `table.size()` is the int64 scalar count; as in SOK, `table.size` also reads as the
        int64 shape [rows, dimension] (`table.size[0]`, `tf.convert_to_tensor(table.size)`).
        With several ranks every rank must read it (the count is summed over ranks).
        """
        rows = comm.current().allreduce_sum(dynamic_ops.size(self.handle))
        return TableSize(rows, self._dimension)

    def sparse_read(self, indices, name=None) -> tf.Tensor:
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
                rows = dynamic_ops.lookup(
                    self.handle,
                    tf.cast(flat, tf.int64),
                    self._dimension,
                    f"dynamic table '{self._label}'",
                )
            else:
                # One key per sample: the owners' rows, each "combined" alone.
                rows = _multi_rank_read(self, tf.expand_dims(flat, 1))
            out = tf.reshape(rows, tf.concat([tf.shape(keys), [self._dimension]], 0))
            return tf.ensure_shape(out, keys.shape.concatenate([self._dimension]))

    @property
    def _label(self) -> str:
        return self.name.split(":")[0]

    def gather_nd(self, indices, name=None):
        """Not supported: a hash table is read by key, with tf.gather or lookup_sparse.

        Raises:
          NotImplementedError: always.
        """
        raise NotImplementedError(
            f"'{self._label}' is a DynamicVariable: read rows by key with tf.gather(table, "
            "keys), tf.nn.embedding_lookup or sok_lite.lookup_sparse"
        )

    def __repr__(self):
        return (
            f"<sok_lite.DynamicVariable '{self._label}' dimension={self._dimension} "
            f"mode={self.mode}>"
        )
