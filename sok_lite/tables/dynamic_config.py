"""What a hash table's constructor reads (sok_lite.tables.dynamic.DynamicTable): the dtypes it
stores, the per-key initializer, the host device of a CPU table and checked sizes."""

import itertools
import numbers
from typing import TypedDict

import numpy as np
import tensorflow as tf

from sok_lite.tables.initializers import RowInitializer, row_initializer

_table_ids = itertools.count()  # a process-wide number for each table created
RESTORE_ROWS = 65536  # rows per assign of a restore

# The value dtypes a hash table stores (rows are read as float32 from any of them).
DYNAMIC_DTYPES = (tf.float32, tf.bfloat16, tf.float16)


class CreateArgs(TypedDict):
    """How a hash table was configured: sok_lite.ops.hash_table_ops.create_table's arguments
    besides its shared name and tier path (kept to create a staging table alike)."""

    dim: int
    init: RowInitializer
    capacity: int  # rows per rank, 0: unbounded
    policy: str
    min_count: int
    ram_budget: int
    storage_dtype: tf.DType
    rounding_seed: int


def _initializer_spec(initializer: object) -> object:
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


def positive_int(value: object, what: str) -> int:
    """`value` as an int, which must be a positive integer (not a bool).

    Raises:
      ValueError: naming `what`, for anything else.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{what} must be a positive int, got {value!r}")
    if value <= 0:
        raise ValueError(f"{what} must be a positive int, got {value}")
    return int(value)
