"""sok_lite.DynamicVariable: a hash-table embedding whose rows are created on first lookup."""

import contextlib
import itertools
import math

import tensorflow as tf

from sok_lite import comm
from sok_lite._compat import BaseResourceVariable
from sok_lite.comm.shards import create_shards
from sok_lite.initializers import RowInitializer, row_initializer
from sok_lite.ops import dynamic_ops

_table_ids = itertools.count()


class DynamicVariable(BaseResourceVariable):
    """An embedding table keyed by arbitrary int64 (or int32) ids, grown as keys appear.

    Memory follows the keys actually seen, not the key space: a row is created the first time
    its key is looked up, with a value that depends only on (key, seed, initializer), so the same
    key gets the same initial row on any number of ranks and in any arrival order. Key k lives on
    the rank its hash selects. Optimizer slots live in the table beside each row.

    Args:
      dimension: the row width (> 0).
      initializer: a Keras initializer kind (name or object: RandomNormal, TruncatedNormal,
        RandomUniform, Zeros, Ones, Constant) or a number.
      key_dtype: tf.int64 (default) or tf.int32; every value of the type is a valid key.
      dtype: tf.float32.
      capacity: rows the table may hold over all ranks (None: unbounded). When full, a lookup
        first evicts the least recently used rows (or least frequently used with
        evict_policy="lfu") that the current lookup does not need.
      name: the table name.
      trainable: whether optimizers update it.
      evict_policy: "lru" or "lfu", used with capacity.
      min_count: a key gets a stored, trainable row from its min_count-th lookup on; before
        that it reads the initializer's value and receives no update.

    Raises:
      ValueError: a non-positive dimension, an unsupported key or value dtype, an initializer
        that cannot be computed per key, or bad policy settings.

    >>> import tensorflow as tf, sok_lite as sok
    >>> table = sok.DynamicVariable(4, initializer="ones")
    >>> out = sok.lookup_sparse(table, tf.ragged.constant([[2**40, -7]], dtype=tf.int64))
    >>> out.numpy().tolist(), int(table.size())
    ([[2.0, 2.0, 2.0, 2.0]], 2)

    Under a strategy whose process runs several replicas (MirroredStrategy), the constructor
    returns a sok_lite.comm.shards.ReplicaShards with one table per replica.
    """

    def __new__(cls, dimension, *, initializer="random_normal", **kwargs):
        communicator = comm.current()
        if communicator.shards_per_table == 1:
            return super().__new__(cls)
        # The default seed is taken once for the table: every shard initializes keys alike.
        if not isinstance(initializer, RowInitializer):
            initializer = row_initializer(initializer) or initializer
        return create_shards(
            lambda: cls(dimension, initializer=initializer, **kwargs), communicator
        )

    def __init__(
        self,
        dimension: int,
        *,
        initializer="random_normal",
        key_dtype=tf.int64,
        dtype=tf.float32,
        capacity: int | None = None,
        name: str | None = None,
        trainable: bool = True,
        evict_policy: str = "lru",
        min_count: int = 1,
    ):
        if not isinstance(dimension, int) or dimension <= 0:
            raise ValueError(f"DynamicVariable dimension must be a positive int, got {dimension}")
        key_dtype, dtype = tf.as_dtype(key_dtype), tf.as_dtype(dtype)
        if key_dtype not in (tf.int32, tf.int64):
            raise ValueError(f"key_dtype must be int32 or int64, got {key_dtype.name}")
        if dtype != tf.float32:
            raise ValueError(f"DynamicVariable holds float32 rows, got {dtype.name}")
        if evict_policy not in ("lru", "lfu"):
            raise ValueError(f"evict_policy must be 'lru' or 'lfu', got {evict_policy!r}")
        if capacity is not None and capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        init = (
            initializer if isinstance(initializer, RowInitializer) else row_initializer(initializer)
        )
        if init is None:
            raise ValueError(
                f"initializer {initializer!r} cannot be computed per key; use a Keras "
                "RandomNormal, TruncatedNormal, RandomUniform, Zeros, Ones or Constant"
            )
        name = name or "DynamicVariable"
        num_ranks = comm.current().num_ranks
        per_rank = 0 if capacity is None else math.ceil(capacity / num_ranks)
        shared_name = f"sok_lite_dynamic_{name}_{next(_table_ids)}"
        # The GPU table has no capacity eviction or admission: such a table stays on the CPU.
        cpu_only = per_rank > 0 or min_count > 1
        with tf.init_scope(), tf.device("/CPU:0") if cpu_only else contextlib.nullcontext():
            handle = dynamic_ops.create_table(
                shared_name, dimension, init, per_rank, evict_policy, min_count
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
        self._key_dtype = key_dtype
        self._capacity = capacity
        self._init = init

    @property
    def dimension(self) -> int:
        """The row width."""
        return self._dimension

    @property
    def key_dtype(self) -> tf.DType:
        """The dtype of the keys (tf.int64 or tf.int32)."""
        return self._key_dtype

    @property
    def mode(self) -> str:
        """Always "hash": a row lives on the rank its key's hash selects."""
        return "hash"

    @property
    def initializer_spec(self):
        """The per-key initializer (a sok_lite.initializers.RowInitializer)."""
        return self._init

    def size(self) -> tf.Tensor:
        """The number of stored rows over all ranks (int64 scalar)."""
        return comm.current().allreduce_sum(dynamic_ops.size(self.handle))

    def export(self, with_slots: bool = False, since_step: int | None = None):
        """(keys [n], values [n, dim]) stored on this rank; with_slots: rows [n, dim * (1 + k)],
        the value then each optimizer slot; since_step: only rows an optimizer step (or an
        assign) changed after that step."""
        keys, values = dynamic_ops.export(self.handle, with_slots, since_step)
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
        values = tf.convert_to_tensor(values, tf.float32)
        width = values.shape[-1]
        if not with_slots and width is not None and width != self._dimension:
            raise ValueError(
                f"'{self.name}': values of width {width} for dimension {self._dimension}"
            )
        step = dynamic_ops.INT64_MAX if step is None else step
        return dynamic_ops.assign(self.handle, tf.cast(keys, tf.int64), values, with_slots, step)

    def evict(self, steps_unseen: int) -> tf.Tensor:
        """Removes rows not looked up during the last steps_unseen lookups; returns how many
        this rank removed."""
        return dynamic_ops.evict(self.handle, tf.constant(steps_unseen, tf.int64))

    # tf.train.Checkpoint: this rank's keys and rows (value and optimizer slots).
    def _serialize_to_tensors(self):
        keys, rows = dynamic_ops.export(self.handle, with_slots=True)
        return {"keys": keys, "rows": rows}

    def _restore_from_tensors(self, restored_tensors):
        cleared = dynamic_ops.clear(self.handle)
        with tf.control_dependencies([cleared] if cleared is not None else []):
            return dynamic_ops.assign(
                self.handle, restored_tensors["keys"], restored_tensors["rows"], with_slots=True
            )

    # A hash table has no dense value: reading it whole is a mistake, not a copy.
    def value(self):
        raise ValueError(
            f"'{self.name}' is a DynamicVariable: read rows with lookup_sparse or export()"
        )

    read_value = value

    def _dense_var_to_tensor(self, *args, **kwargs):
        return self.value()

    def __repr__(self):
        return f"<sok_lite.DynamicVariable '{self.name}' dimension={self._dimension}>"
