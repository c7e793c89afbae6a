"""sok.DynamicVariable: sok_lite's hash table with SOK 2.x's constructor and names.

The table itself (sok_lite.tables.dynamic.DynamicTable) takes sok_lite's own arguments and
knows nothing of SOK. SokDynamicVariable, mixed in above it, translates SOK's arguments (its
positional order, var_type, constraint, key_type, init_capacity / max_capacity and the
HierarchicalKV settings) into those, and adds SOK's attributes: key_type, handle_dtype,
backend_type, config_dict, and `size` that also reads as a property (TableSize).
"""

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import tensorflow as tf

from sok_lite import comm
from sok_lite.tables import register_table_class
from sok_lite.tables.dynamic import DynamicTable
from sok_lite.tables.dynamic_config import positive_int
from sok_lite.tables.placement import Placement
from sok_lite.tables.storage import Disk

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


class TableSize:
    """The number of rows of a DynamicVariable, readable the sok_lite way and the SOK way.

    `table.size()` is the int64 scalar row count over all ranks. As in SOK, `table.size` itself
    also stands for the int64 shape [rows, dimension]: `table.size[0]` is the row count,
    `tf.convert_to_tensor(table.size)` and `table.size.numpy()` the pair, `int(table.size)` the
    row count. The count is taken when `size` is read.
    """

    def __init__(self, rows: tf.Tensor, dimension: int) -> None:
        self._rows = rows
        self._dimension = dimension

    def __call__(self) -> tf.Tensor:
        return self._rows

    def shape(self) -> tf.Tensor:
        """The int64 [rows, dimension]."""
        return tf.stack([self._rows, tf.constant(self._dimension, tf.int64)])

    def __getitem__(self, index: int | slice) -> tf.Tensor:
        return self.shape()[index]

    def __int__(self) -> int:
        return int(self._rows)

    def numpy(self) -> npt.NDArray[np.int64]:
        pair: npt.NDArray[np.int64] = self.shape().numpy()
        return pair

    def __array__(
        self, dtype: npt.DTypeLike | None = None, copy: bool | None = None
    ) -> npt.NDArray[np.generic]:
        return np.asarray(self.numpy(), dtype=dtype)

    def __repr__(self) -> str:
        rows: int | str
        try:
            rows = int(self._rows)
        except TypeError:  # symbolic, inside a tf.function
            rows = "?"
        return f"<sok_lite.DynamicVariable size: rows={rows} dimension={self._dimension}>"


tf.register_tensor_conversion_function(
    TableSize, lambda value, dtype=None, name=None, as_ref=False: value.shape()
)


def _evict_policy(config: dict[str, object], evict_policy: str | None) -> str:
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
    if not isinstance(strategy, str) or strategy not in _HKV_EVICT:
        raise ValueError(f"evict_strategy must be one of {sorted(_HKV_EVICT)}, got {strategy!r}")
    if evict_policy is not None and evict_policy != _HKV_EVICT[strategy]:
        raise ValueError(f"evict_strategy {strategy!r} and evict_policy {evict_policy!r} disagree")
    return _HKV_EVICT[strategy]


def _key_dtype(key_type: tf.DType | str | None, key_dtype: tf.DType | str | None) -> tf.DType | str:
    """key_dtype, given as itself or as SOK's key_type (int64 when neither is)."""
    if key_type is not None and key_dtype is not None:
        if tf.as_dtype(key_type) != tf.as_dtype(key_dtype):
            raise ValueError(
                f"key_type {tf.as_dtype(key_type).name} and key_dtype "
                f"{tf.as_dtype(key_dtype).name} disagree; pass one of them"
            )
    chosen = key_dtype if key_dtype is not None else key_type
    return tf.int64 if chosen is None else chosen


def _capacity(capacity: int | None, max_capacity: int | None, mode: str) -> int | None:
    """The rows over all ranks: capacity, or SOK's max_capacity per rank times the ranks that
    hold rows (1 for "localized:K")."""
    if max_capacity is None:
        return capacity
    per_rank = positive_int(max_capacity, "max_capacity")
    holders = comm.current().num_ranks if Placement.parse(mode).kind == "distributed" else 1
    if capacity is not None and positive_int(capacity, "capacity") != per_rank * holders:
        raise ValueError(
            f"capacity {capacity} and max_capacity {per_rank} per rank disagree; pass one of them"
        )
    return per_rank * holders


if TYPE_CHECKING:
    # The table class the mixin sits above (see DynamicVariable), for the checker only.
    _TableBase = DynamicTable
else:
    _TableBase = object


class SokDynamicVariable(_TableBase):
    """SOK's constructor and attributes of a hash table, mixed in above the table class
    (sok_lite.tables.dynamic.DynamicTable), to which it passes sok_lite's own arguments."""

    def __init__(
        self,
        dimension: int,
        initializer: object = None,
        var_type: str | None = None,
        name: str | None = None,
        constraint: object = None,
        trainable: bool = True,
        key_type: tf.DType | str | None = None,
        dtype: tf.DType | str | None = None,
        mode: str | None = None,
        *,
        key_dtype: tf.DType | str | None = None,
        capacity: int | None = None,
        evict_policy: str | None = None,
        min_count: int = 1,
        storage: Disk | None = None,
        init_capacity: int | None = None,
        max_capacity: int | None = None,
        **config: object,
    ) -> None:
        var_type = "hbm" if var_type is None else var_type
        if var_type not in VAR_TYPES:
            raise ValueError(f"var_type must be one of {VAR_TYPES}, got {var_type!r}")
        if constraint is not None:
            raise ValueError("DynamicVariable does not support a constraint")
        mode = "distributed" if mode is None else mode
        evict_policy = _evict_policy(config, evict_policy)
        if init_capacity is not None:
            init_capacity = positive_int(init_capacity, "init_capacity")
        super().__init__(
            dimension,
            initializer,
            name=name,
            trainable=trainable,
            dtype=tf.float32 if dtype is None else dtype,
            mode=mode,
            key_dtype=_key_dtype(key_type, key_dtype),
            capacity=_capacity(capacity, max_capacity, mode),
            evict_policy=evict_policy,
            min_count=min_count,
            storage=storage,
        )
        self._var_type = var_type
        self._config = dict(config)
        if init_capacity is not None:
            self._config["init_capacity"] = init_capacity
        if max_capacity is not None:
            self._config["max_capacity"] = max_capacity

    @property
    def key_type(self) -> tf.DType:
        """SOK's name for key_dtype."""
        return self.key_dtype

    @property
    def handle_dtype(self) -> tf.DType:
        """SOK's name for the value dtype (the storage dtype: float32, bfloat16 or float16)."""
        return self.dtype

    @property
    def backend_type(self) -> str:
        """SOK's var_type given at construction ("hbm" or "hybrid"); both are this table."""
        return self._var_type

    @property
    def config_dict(self) -> dict[str, object]:
        """SOK's table settings given at construction (init_capacity, max_capacity, ...)."""
        return dict(self._config)

    @property
    def size(self) -> TableSize:
        """The number of stored rows over all ranks.

        `table.size()` is the int64 scalar count; as in SOK, `table.size` also reads as the
        int64 shape [rows, dimension] (`table.size[0]`, `tf.convert_to_tensor(table.size)`).
        With several ranks every rank must read it (the count is summed over ranks).
        """
        return TableSize(super().size(), self.dimension)


class DynamicVariable(SokDynamicVariable, DynamicTable):
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


# TableSpec.build (a Keras layer's hash tables, sok.TableSpec(kind="hash").build()) makes these.
register_table_class("hash", DynamicVariable)
