"""What DynamicVariable's constructor reads: the dtypes and SOK settings a hash table takes,
the per-key initializer, and TableSize (what table.size() returns)."""

import itertools
import numbers

import numpy as np
import tensorflow as tf

from sok_lite.tables.initializers import RowInitializer, row_initializer

_table_ids = itertools.count()  # a process-wide number for each table created
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
