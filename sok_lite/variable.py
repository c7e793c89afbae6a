"""sok_lite.Variable: a tf.Variable that holds this rank's shard of an embedding table."""

import numpy as np
import tensorflow as tf

from sok_lite import comm
from sok_lite._compat import ResourceVariable
from sok_lite.comm.shards import create_shards
from sok_lite.initializers import RowInitializer, row_initializer
from sok_lite.placement import Placement


def _global_value(initial_value, dtype) -> tf.Tensor:
    if callable(initial_value):
        initial_value = initial_value()
    if isinstance(initial_value, np.ndarray) or not tf.is_tensor(initial_value):
        initial_value = np.asarray(initial_value)
    return tf.cast(initial_value, dtype)


def _local_row_ids(placement: Placement, rows: int, rank: int, num_ranks: int) -> tf.Tensor:
    if placement.kind == "distributed":
        return tf.range(rank, rows, num_ranks, dtype=tf.int64)
    return tf.range(rows if rank == placement.rank else 0, dtype=tf.int64)


def _row_initializer(initializer) -> RowInitializer | None:
    if isinstance(initializer, RowInitializer):
        return initializer
    return row_initializer("random_normal" if initializer is None else initializer)


def _local_value(initial_value, shape, initializer, dtype, placement, rank, num_ranks):
    """This rank's rows and the global shape, from a global value or from shape + initializer."""
    if initial_value is not None:
        if shape is not None or initializer is not None:
            raise ValueError("pass either initial_value or shape/initializer, not both")
        value = _global_value(initial_value, dtype)
        if value.shape.rank != 2:
            raise ValueError(f"an embedding table must be 2-D [rows, dim], got shape {value.shape}")
        if placement.kind == "distributed":
            return value[rank::num_ranks], value.shape
        return (value if rank == placement.rank else value[:0]), value.shape
    if shape is None:
        raise ValueError("pass initial_value, or shape= (with an optional initializer=)")
    shape = tf.TensorShape(shape)
    if shape.rank != 2 or not shape.is_fully_defined():
        raise ValueError(f"an embedding table must be 2-D [rows, dim], got shape {shape}")
    rows, dim = shape.as_list()
    ids = _local_row_ids(placement, rows, rank, num_ranks)
    init = _row_initializer(initializer)
    if init is not None:
        return init(ids, dim, dtype), shape
    # Any other callable(shape, dtype): evaluated on the global shape, then sliced. Correct for
    # every rank count, but each rank computes the whole table once.
    return tf.gather(tf.cast(initializer(shape, dtype=dtype), dtype), ids), shape


class Variable(ResourceVariable):
    """An embedding table whose rows are spread over the ranks of the job.

    This rank holds only its own rows: with mode "distributed", global row i lives on rank
    i % N at local row i // N; with "localized:K", rank K holds the whole table and every other
    rank a [0, dim] variable. With one rank the local shard is the whole table.

    Args:
      initial_value: the GLOBAL table, [rows, dim] (array, tensor or a callable returning one).
        Each rank keeps its rows.
      shape: the global [rows, dim], when initial_value is not given.
      initializer: with shape: a Keras initializer (name or object: RandomNormal, TruncatedNormal,
        RandomUniform, Zeros, Ones, Constant), a number, or any callable(shape, dtype). The Keras
        kinds are computed per row from (seed, global row id): the global table is the same for
        every number of ranks. Default "random_normal" (stddev 0.05).
      dtype: the value dtype (float32 or float64).
      mode: "distributed" or "localized:K".
      name: the variable name.
      trainable: whether the variable is trainable.

    Raises:
      ValueError: for a table that is not 2-D, a bad mode or conflicting arguments.

    >>> import numpy as np, sok_lite as sok
    >>> v = sok.Variable(np.zeros([17, 3]), dtype="float32")
    >>> v.global_shape, v.mode
    (TensorShape([17, 3]), 'distributed')

    Under a tf.distribute strategy whose process runs several replicas (MirroredStrategy), the
    constructor returns a sok_lite.comm.shards.ReplicaShards: one Variable per replica, each
    holding that replica's rows, which stands for the running replica's shard inside
    strategy.run.
    """

    def __new__(cls, initial_value=None, *, shape=None, initializer=None, **kwargs):
        communicator = comm.current()
        if communicator.shards_per_table == 1:
            return super().__new__(cls)
        # Random values are drawn (and default seeds taken) once for the table, not per shard.
        dtype = tf.as_dtype(kwargs.get("dtype", tf.float32))
        if initial_value is not None:
            initial_value = _global_value(initial_value, dtype)
        elif shape is not None:
            init = _row_initializer(initializer)
            if init is None:
                initial_value = tf.cast(initializer(tf.TensorShape(shape), dtype=dtype), dtype)
                shape = None
            initializer = init
        return create_shards(
            lambda: cls(initial_value, shape=shape, initializer=initializer, **kwargs),
            communicator,
        )

    def __init__(
        self,
        initial_value=None,
        *,
        shape=None,
        initializer=None,
        dtype=tf.float32,
        mode: str = "distributed",
        name: str | None = None,
        trainable: bool = True,
    ):
        dtype = tf.as_dtype(dtype)
        if dtype not in (tf.float32, tf.float64):
            raise ValueError(f"sok_lite.Variable supports float32 and float64, got {dtype.name}")
        placement = Placement.parse(mode)
        communicator = comm.current()
        rank, num_ranks = communicator.rank, communicator.num_ranks
        if placement.kind == "localized" and placement.rank >= num_ranks:
            raise ValueError(f"mode {mode!r} names rank {placement.rank} of {num_ranks}")
        local, global_shape = _local_value(
            initial_value, shape, initializer, dtype, placement, rank, num_ranks
        )
        super().__init__(initial_value=local, trainable=trainable, name=name, dtype=dtype)
        self._global_shape = global_shape
        self._placement = placement

    @property
    def global_shape(self) -> tf.TensorShape:
        """The [rows, dim] of the whole table across ranks."""
        return self._global_shape

    @property
    def mode(self) -> str:
        """ "distributed" or "localized:K"."""
        return self._placement.mode

    @property
    def placement(self) -> Placement:
        return self._placement

    @property
    def target_gpu(self) -> int:
        """As in SOK: K for mode "localized:K", -1 for "distributed"."""
        return self._placement.target_gpu

    @property
    def num_gpus(self) -> int:
        """As in SOK: the number of ranks of the job (a rank is one device)."""
        return comm.current().num_ranks

    def key_map(self, indices):
        """As in SOK: the local rows of global row ids that this rank owns (distributed: id // N;
        localized: the id itself)."""
        indices = tf.convert_to_tensor(indices)
        if self._placement.kind == "localized":
            return indices
        return indices // tf.cast(comm.current().num_ranks, indices.dtype)

    @classmethod
    def local_slot(cls, primary: "Variable", local_value, name: str) -> "Variable":
        """A non-trainable variable with `primary`'s placement, from this rank's local value.

        Used for optimizer slots, which follow their table row for row.
        """
        slot = ResourceVariable.__new__(cls)  # one shard, whatever the strategy
        ResourceVariable.__init__(
            slot, initial_value=local_value, trainable=False, name=name, dtype=primary.dtype
        )
        slot._global_shape = primary.global_shape
        slot._placement = primary.placement
        return slot
