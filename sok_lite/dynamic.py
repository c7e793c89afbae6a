"""sok_lite.DynamicVariable: a hash-table embedding whose rows are created on first lookup."""

import contextlib
import itertools
import math
import numbers

import numpy as np
import tensorflow as tf

from sok_lite import comm
from sok_lite._tf_internals import BaseResourceVariable, variable_accessed
from sok_lite.comm.shards import create_shards
from sok_lite.initializers import RowInitializer, row_initializer
from sok_lite.key_hash import OWNER_BY_HASH, hash_owner
from sok_lite.lookup import lookup_sparse
from sok_lite.memory_stats import MEMORY_STATS, ram_only
from sok_lite.ops import dynamic_ops
from sok_lite.optimizer_rules import rule_for
from sok_lite.placement import Placement
from sok_lite.serving import ServingTable
from sok_lite.staging import ReplayedRows, StagedRows, SwappedRows
from sok_lite.storage import Disk, release_when_deleted, table_dir
from sok_lite.table_dtypes import HALF_DTYPES, check_table_dtype, check_value_range, rounding_seed
from sok_lite.table_kind import TableKind

_table_ids = itertools.count()
RESTORE_ROWS = 65536  # rows per assign of a restore

# The value dtypes a hash table stores (rows are read as float32 from any of them).
DYNAMIC_DTYPES = (tf.float32, tf.bfloat16, tf.float16)

# SOK's table backends ("hbm": its GPU hash table, "hybrid": HierarchicalKV); both are this
# hash table.
VAR_TYPES = ("hbm", "hybrid")
# SOK's HierarchicalKV tuning settings: accepted and recorded in config_dict, with no effect.
_HKV_HINTS = frozenset(
    {
        "max_hbm_for_vectors",
        "max_bucket_size",
        "max_load_factor",
        "block_size",
        "io_block_size",
        "device_id",
        "io_by_cpu",
    }
)
_HKV_EVICT = {"kLru": "lru", "kLfu": "lfu"}


def _initializer_spec(initializer):
    """The per-key initializer when it can be computed, else the argument unchanged."""
    if initializer is None:
        initializer = "random_normal"
    if isinstance(initializer, RowInitializer):
        return initializer
    return row_initializer(initializer) or initializer


def _host_device() -> str:
    """The CPU beside the device that ops are placed on now: that device itself when it is a
    CPU (such as one of MirroredStrategy's logical CPUs, each a replica), else CPU 0 of its
    host."""
    placed = tf.DeviceSpec.from_string(tf.identity(0).device)
    if placed.device_type == "CPU":
        return placed.to_string()
    return placed.replace(device_type="CPU", device_index=0).to_string()


def _positive_int(value, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{what} must be a positive int, got {value!r}")
    if value <= 0:
        raise ValueError(f"{what} must be a positive int, got {value}")
    return int(value)


class TableSize:
    """The number of rows of a DynamicVariable, readable the sok_lite way and the SOK way.

    `table.size()` is the int64 scalar row count over all ranks. As in SOK, `table.size` itself
    also stands for the int64 shape [rows, dimension]: `table.size[0]` is the row count,
    `tf.convert_to_tensor(table.size)` and `table.size.numpy()` the pair, `int(table.size)` the
    row count. The count is taken when `size` is read.
    """

    def __init__(self, rows: tf.Tensor, dimension: int):
        self._rows = rows
        self._dimension = dimension

    def __call__(self) -> tf.Tensor:
        return self._rows

    def shape(self) -> tf.Tensor:
        """The int64 [rows, dimension]."""
        return tf.stack([self._rows, tf.constant(self._dimension, tf.int64)])

    def __getitem__(self, index):
        return self.shape()[index]

    def __int__(self) -> int:
        return int(self._rows)

    def numpy(self) -> np.ndarray:
        return self.shape().numpy()

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.numpy(), dtype=dtype)

    def __repr__(self):
        try:
            rows = int(self._rows)
        except TypeError:  # symbolic, inside a tf.function
            rows = "?"
        return f"<sok_lite.DynamicVariable size: rows={rows} dimension={self._dimension}>"


tf.register_tensor_conversion_function(
    TableSize, lambda value, dtype=None, name=None, as_ref=False: value.shape()
)


class DynamicVariable(BaseResourceVariable, TableKind):
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
        """The per-key initializer (a sok_lite.initializers.RowInitializer)."""
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
                rows = lookup_sparse(self, tf.expand_dims(flat, 1), hotness=1)
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

    def export(self, with_slots: bool = False, since_step: int | None = None):
        """(keys [n], values [n, dim]) stored on this rank; with_slots: rows [n, dim * (1 + k)],
        the value then each optimizer slot; since_step: only rows an optimizer step (or an
        assign) changed after that step."""
        keys, values = dynamic_ops.export(
            self.handle, with_slots, since_step, f"dynamic table '{self._label}'"
        )
        return tf.cast(keys, self._key_dtype), values

    def assign(self, keys, values, with_slots: bool = False, step: int | None = None, **unused):
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
        step = dynamic_ops.INT64_MAX if step is None else step
        return dynamic_ops.assign(
            self.handle,
            tf.cast(keys, tf.int64),
            values,
            with_slots,
            step,
            f"dynamic table '{self._label}'",
        )

    def evict(self, steps_unseen: int) -> tf.Tensor:
        """Removes rows not looked up during the last steps_unseen lookups; returns how many
        this rank removed."""
        return dynamic_ops.evict(self.handle, tf.constant(steps_unseen, tf.int64))

    def replace_rows(self, keys, rows):
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
                lambda handle: dynamic_ops.assign(
                    handle, keys, rows, with_slots=True, table_name=f"dynamic table '{self._label}'"
                ),
            )
            try:
                staged.commit()
            finally:
                staged.discard()
            return None
        with tf.control_dependencies(checks):
            cleared = dynamic_ops.clear(self.handle)
        with tf.control_dependencies([c for c in [cleared] if c is not None] + checks):
            return dynamic_ops.assign(self.handle, keys, rows, with_slots=True)

    # tf.train.Checkpoint: this rank's keys and rows (value and optimizer slots).
    def _serialize_to_tensors(self):
        keys, rows = dynamic_ops.export(self.handle, with_slots=True)
        return {"keys": keys, "rows": rows}

    def _restore_from_tensors(self, restored_tensors):
        return self.replace_rows(restored_tensors["keys"], restored_tensors["rows"])

    # A hash table has no dense value: reading it whole is a mistake, not a copy.
    def value(self):
        raise ValueError(
            f"'{self._label}' is a DynamicVariable, a hash table with no dense value: read rows "
            "by key with tf.gather(table, keys), tf.nn.embedding_lookup or lookup_sparse, or "
            "every stored row with export(). A Keras model holding one has no get_weights(): "
            "save and restore it with save_weights() / load_weights(), model.save(), "
            "tf.train.Checkpoint or sok.dump / sok.load"
        )

    read_value = value

    def _dense_var_to_tensor(self, *args, **kwargs):
        return self.value()

    # --- TableKind: key k on rank hash(k) % N (or every key on rank K) ---------------------

    keyed = True
    checkpoint_kind = "dynamic"
    apply_op = "SokLiteDynamicApply"
    id_limit = -1  # any key

    @property
    def owner_code(self) -> int:
        return self._placement.rank if self._placement.kind == "localized" else OWNER_BY_HASH

    @property
    def id_dtypes(self) -> tuple:
        return (tf.int32,) if self._key_dtype == tf.int32 else (tf.int32, tf.int64)

    def owners(self, ids: np.ndarray, num_ranks: int) -> np.ndarray:
        if self._placement.kind == "localized":
            return np.full(len(ids), self._placement.rank)
        return hash_owner(ids, num_ranks)

    def local_ids(self, ids, num_ranks):
        return ids  # a hash table stores rows by key

    @staticmethod
    def read_local(tables, ids, labels) -> list:
        return [
            dynamic_ops.lookup(t.handle, i, t.dimension, label)
            for t, i, label in zip(tables, ids, labels)
        ]

    def combines_in_place(self, num_ranks: int) -> bool:
        # On one rank's CPU the dedup and the [unique, dim] copy of the rows cost more than
        # probing every id.
        if num_ranks != 1:
            return False
        return self._on_host()

    def lookup_combine(self, ids, splits, weights, combiner, hotness, label):
        return dynamic_ops.lookup_combine(
            self.handle, ids, splits, weights, self._dimension, combiner, hotness, label
        )

    def gradient_rows(self, values, indices) -> tf.IndexedSlices:
        return tf.IndexedSlices(values, indices)  # indices are keys: no dense shape

    def apply_rows(self, optimizer, rule, grad, hyper, step) -> None:
        # Slots live in the hash table beside each row.
        slot_init = [fill for _, fill in rule.slots]
        label = f"dynamic table '{self._label}'"
        dynamic_ops.apply(
            self.handle, grad.indices, grad.values, hyper, rule.kind, slot_init, label, step
        )

    def slot_variables(self, optimizer, rule) -> None:
        return None

    def checkpoint_meta(self) -> dict:
        return {"kind": self.checkpoint_kind, "dim": self._dimension}

    def checkpoint_chunks(self, optimizer, since_step, chunk_rows):
        fills = [fill for _, fill in rule_for(optimizer).slots] if optimizer is not None else []
        for keys, rows in self._export_pieces(optimizer is not None, since_step, chunk_rows):
            keys = keys.astype(np.int64)
            # A table the optimizer has not stepped yet has no slots laid out: save the values
            # its slots will start from, so that every checkpoint row has the manifest's width.
            missing = fills[rows.shape[1] // self._dimension - 1 :]
            if missing:
                pad = np.repeat(np.float32(missing), self._dimension)
                rows = np.concatenate([rows, np.broadcast_to(pad, (len(rows), len(pad)))], axis=1)
            yield keys, rows

    def _export_pieces(self, with_slots, since_step, chunk_rows):
        """(keys, rows) NumPy pieces of at most chunk_rows rows over both tiers; at least one
        (maybe empty). A host table is read a piece at a time: a dump never holds it whole."""
        label = f"dynamic table '{self._label}'"
        if not self._on_host():
            keys, rows = dynamic_ops.export(self.handle, with_slots, since_step, label)
            keys, rows = keys.numpy(), rows.numpy()
            for start in range(0, max(len(keys), 1), chunk_rows):
                yield keys[start : start + chunk_rows], rows[start : start + chunk_rows]
            return
        cursor, first = 0, True
        while cursor >= 0:
            keys, rows, cursor = dynamic_ops.export_range(
                self.handle, cursor, chunk_rows, with_slots, since_step, label
            )
            cursor = int(cursor)
            if len(keys) or first:
                yield keys.numpy(), rows.numpy()
            first = False

    def checkpoint_stage(self, pieces, optimizer, step) -> "StagedRows":
        """Loads pieces into a staging table beside this one; the table itself changes only
        when the result's commit() swaps them in (sok_lite.staging)."""
        # With slots, assign lays them out in the table first (see SokLiteDynamicAssign), from
        # the optimizer's initial values: a key first seen after the restore starts its slots
        # there, as it would have without the restore.
        with_slots = optimizer is not None and bool(rule_for(optimizer).slots)
        fills = [fill for _, fill in rule_for(optimizer).slots] if with_slots else []
        width = self._dimension * (1 + len(fills))
        step = -1 if step is None else step
        label = f"dynamic table '{self._label}'"
        # One empty assign first: it lays the slots out even when there are no rows.
        pieces = itertools.chain([(np.zeros([0], np.int64), np.zeros([0, width]))], pieces)

        def fill(handle):
            # A piece at a time: a tiered table spills between them, and the rows are never
            # whole in RAM.
            for ids, rows in pieces:
                for start in range(0, max(len(ids), 1), RESTORE_ROWS):
                    piece = slice(start, start + RESTORE_ROWS)
                    keys = tf.cast(tf.constant(ids[piece]), tf.int64)
                    values = tf.constant(rows[piece], tf.float32)
                    dynamic_ops.assign(handle, keys, values, with_slots, step, label, fills)
            self._check_capacity(handle)

        if not self._on_host():
            return ReplayedRows(self, fill)
        return SwappedRows(self, self._new_staging_table, fill)

    def _check_capacity(self, handle) -> None:
        """Refuses staged rows beyond this rank's capacity: a load must not leave the next
        lookup to drop them."""
        per_rank = self.rank_capacity
        held = int(dynamic_ops.size(handle))
        if per_rank and held > per_rank:
            raise ValueError(
                f"dynamic table '{self._label}': the rows loaded for rank "
                f"{comm.current().rank} are {held}, more than its capacity of {per_rank} "
                f"(capacity={self._capacity} over all ranks): create the table with a larger "
                "capacity (or none) to load them"
            )

    def _new_staging_table(self, tier_dir: str):
        """An empty host table configured as this one, its disk tier (if any) in tier_dir."""
        with tf.init_scope(), tf.device(_host_device()):
            return dynamic_ops.create_table(
                f"{self._unique_id}_staged_{next(_table_ids)}",
                tier_path=tier_dir,
                **self._create_args,
            )

    def export_rows(self):
        return self.export()

    def assign_rows(self, ids, values) -> None:
        self.assign(ids, values)

    def serving_copy(self) -> ServingTable:
        keys, values = self.export()
        keys = comm.current().allgather(tf.cast(keys, tf.int64))
        values = comm.current().allgather(values)
        # A 16-bit table serves its rows in 16 bits (exact: they were widened for the export).
        rows = tf.Variable(tf.cast(values, self.dtype), trainable=False)
        return ServingTable.keyed(keys, rows, self._init)

    def __repr__(self):
        return (
            f"<sok_lite.DynamicVariable '{self._label}' dimension={self._dimension} "
            f"mode={self.mode}>"
        )


class _Refused:
    """A tf.Variable method that a hash table refuses with a clear message."""

    def __set_name__(self, owner, name):
        self._method = name

    def __get__(self, table, owner=None):
        method = self._method

        def refuse(*args, **kwargs):
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
    _refused.__set_name__(DynamicVariable, _method)
    setattr(DynamicVariable, _method, _refused)
del _method, _refused
