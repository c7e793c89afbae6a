"""The rest of SOK 2.x's top-level names, on sok_lite's tables and communicators.

`import sok_lite as sok` then finds them where SOK code looks: sok.tf_version, sok.raw_ops,
sok.communication, sok.set_comm_tool, sok.DistributedVariable, sok.LocalizedVariable,
sok.assign, sok.export, sok.incremental_model_dump, sok.sparse_read_and_evict,
sok.all2all_dense_embedding and sok.SGD. docs/migration_from_sok.md says how each compares.
"""

import datetime
import inspect
import re

import keras
import numpy as np
import tensorflow as tf

from sok_lite import comm
from sok_lite.comm import communication
from sok_lite.comm.shards import ReplicaShards, local_shard
from sok_lite.dynamic import DynamicVariable
from sok_lite.lookup import lookup_sparse
from sok_lite.optimizer import OptimizerWrapper
from sok_lite.table_kind import TableKind
from sok_lite.variable import Variable


class _VersionList(list):
    """The running TensorFlow's version as a list of ints, as SOK's `sok.tf_version`:
    [2, 21, 0] for TensorFlow 2.21.0 (a suffix such as "rc1" is dropped)."""


tf_version = _VersionList(
    int(re.match(r"\d*", part).group() or 0) for part in tf.__version__.split(".")
)


class _RawOps:
    """sok_lite's op library, as SOK's `sok.raw_ops` is SOK's: attribute access loads it
    on first use (importing sok_lite does not). The ops are sok_lite's own (named
    `sok_lite_*`), not SOK's; most code needs only the public functions."""

    def __getattr__(self, name):
        if name.startswith("__"):  # introspection must not load the library
            raise AttributeError(name)
        from sok_lite import _loader

        return getattr(_loader.ops(), name)

    def __dir__(self):
        from sok_lite import _loader

        return dir(_loader.ops())

    def __repr__(self):
        return "<sok_lite op library (sok.raw_ops)>"


raw_ops = _RawOps()


def set_comm_tool(tool: str) -> None:
    """Chooses the communicator, as SOK's `sok.set_comm_tool`: the same as sok.init(tool).

    Args:
      tool: "horovod" (or "hvd"), or any other value sok.init takes ("auto", "strategy",
        "local").

    Raises:
      ValueError: for a tool sok.init does not know.
    """
    comm.init(tool)


# --- DistributedVariable / LocalizedVariable ------------------------------------------------


def _table_of(obj):
    """The sok_lite.Variable behind obj (a ReplicaShards stands for its shards), or None."""
    if isinstance(obj, ReplicaShards):
        obj = obj.shards[0]
    return obj if isinstance(obj, Variable) else None


class _TableKind(type):
    """Makes a SOK variable class build a sok_lite.Variable with SOK's signature (that of the
    class's __init__), and `isinstance` recognise a sok_lite.Variable of the class's mode."""

    def __call__(cls, *args, **kwargs):
        bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        del arguments["self"]
        return cls._create(**arguments)

    def __instancecheck__(cls, obj):
        table = _table_of(obj)
        return table is not None and cls._is_mode(table.mode)


# tf.Variable arguments of SOK's classes that a sok_lite table cannot honour unless left unset.
_UNSUPPORTED = (
    "collections",
    "caching_device",
    "variable_def",
    "import_scope",
    "constraint",
    "distribute_strategy",
    "synchronization",
    "aggregation",
)


def _make_variable(mode, initial_value, trainable, name, dtype, shape, initializer, others):
    for arg in _UNSUPPORTED:
        if others.get(arg) is not None:
            raise ValueError(
                f"{arg}={others[arg]!r} is not supported for sok_lite tables; create the "
                "table with sok.Variable(value, mode=...)"
            )
    if initial_value is not None:
        if not callable(initial_value):
            value = initial_value if tf.is_tensor(initial_value) else np.asarray(initial_value)
            if dtype is None and tf.as_dtype(value.dtype) == tf.float64:
                dtype = tf.float64
            if len(value.shape) == 1:  # SOK takes a [dim] value as one row
                value = tf.reshape(value, [1, -1])
            initial_value = value
        shape = initializer = None
    return Variable(
        initial_value,
        shape=shape,
        initializer=initializer,
        dtype=tf.float32 if dtype is None else dtype,
        mode=mode,
        name=name,
        trainable=True if trainable is None else trainable,
    )


def _check_rank(what: str, given, actual: int) -> None:
    if given is not None and given != actual:
        raise ValueError(f"{what}={given} but this job's is {actual}")


def _check_gpu_id(given, communicator) -> None:
    # Several replicas in this process build one shard each: the id names none of them.
    if communicator.shards_per_table == 1:
        _check_rank("global_gpu_id", given, communicator.rank)


class DistributedVariable(metaclass=_TableKind):
    """SOK's DistributedVariable: builds `sok.Variable(..., mode="distributed")`.

    Row i of the table lives on rank i % num_ranks, as in SOK. The result is a
    sok_lite.Variable; `isinstance(v, sok.DistributedVariable)` is true for every
    sok_lite.Variable of mode "distributed" (so SOK's checks of a `sok.Variable(...)` hold).

    Args:
      initial_value: the global table [rows, dim] (a [dim] value is one row), or None with
        shape and initializer.
      trainable: whether optimizers update it (None: True).
      name: the variable name.
      dtype: float32 or float64 (None: float64 for a float64 value, else float32).
      shape: the global [rows, dim], without initial_value.
      initializer: with shape: a Keras initializer, a number or a callable(shape, dtype).
      global_gpu_id: SOK passes this rank; when given it must be sok.communication.rank().
      num_gpus: SOK passes the rank count; when given it must be sok.communication.num_ranks().
      collections, validate_shape, caching_device, variable_def, import_scope, constraint,
        distribute_strategy, synchronization, aggregation: tf.Variable's; only their defaults
        are accepted.

    Raises:
      ValueError: a non-default tf.Variable argument, ranks that disagree with the job, or
        any error of sok.Variable.

    >>> import numpy as np, sok_lite as sok
    >>> v = sok.DistributedVariable(np.zeros([5, 2]), dtype="float32")
    >>> isinstance(v, sok.Variable), isinstance(v, sok.DistributedVariable), v.mode
    (True, True, 'distributed')
    """

    def __init__(
        self,
        initial_value=None,
        trainable=None,
        collections=None,
        validate_shape=True,
        caching_device=None,
        name=None,
        dtype=None,
        variable_def=None,
        import_scope=None,
        constraint=None,
        distribute_strategy=None,
        synchronization=None,
        aggregation=None,
        shape=None,
        initializer=None,
        global_gpu_id=None,
        num_gpus=None,
    ):
        raise AssertionError("built by the metaclass")  # pragma: no cover

    @staticmethod
    def _is_mode(mode: str) -> bool:
        return mode == "distributed"

    @staticmethod
    def _create(initial_value, trainable, name, dtype, shape, initializer, **rest):
        communicator = comm.current()
        _check_rank("num_gpus", rest.pop("num_gpus"), communicator.num_ranks)
        _check_gpu_id(rest.pop("global_gpu_id"), communicator)
        return _make_variable(
            "distributed", initial_value, trainable, name, dtype, shape, initializer, rest
        )


class LocalizedVariable(metaclass=_TableKind):
    """SOK's LocalizedVariable: builds `sok.Variable(..., mode=f"localized:{target_gpu}")`.

    Rank target_gpu holds the whole table; every other rank a [0, dim] variable, as in SOK. The
    result is a sok_lite.Variable; `isinstance(v, sok.LocalizedVariable)` is true for every
    sok_lite.Variable of a "localized:K" mode.

    Args:
      initial_value: the table [rows, dim] (a [dim] value is one row), or None with shape and
        initializer.
      trainable, name, dtype, shape, initializer: as for DistributedVariable.
      global_gpu_id: SOK passes this rank; when given it must be sok.communication.rank().
      target_gpu: the rank that holds the table (required).
      collections, validate_shape, caching_device, variable_def, import_scope, constraint,
        distribute_strategy, synchronization, aggregation: tf.Variable's; only their defaults
        are accepted.

    Raises:
      TypeError: without target_gpu.
      ValueError: a target_gpu outside the job, a non-default tf.Variable argument, or any
        error of sok.Variable.

    >>> import numpy as np, sok_lite as sok
    >>> v = sok.LocalizedVariable(np.ones([4, 3]), target_gpu=0, dtype="float32")
    >>> isinstance(v, sok.LocalizedVariable), v.mode, v.shape.as_list()
    (True, 'localized:0', [4, 3])
    """

    def __init__(
        self,
        initial_value=None,
        trainable=None,
        collections=None,
        validate_shape=True,
        caching_device=None,
        name=None,
        dtype=None,
        variable_def=None,
        import_scope=None,
        constraint=None,
        distribute_strategy=None,
        synchronization=None,
        aggregation=None,
        shape=None,
        initializer=None,
        global_gpu_id=None,
        target_gpu=None,
    ):
        raise AssertionError("built by the metaclass")  # pragma: no cover

    @staticmethod
    def _is_mode(mode: str) -> bool:
        return mode.startswith("localized")

    @staticmethod
    def _create(initial_value, trainable, name, dtype, shape, initializer, **rest):
        target = rest.pop("target_gpu")
        if target is None:
            raise TypeError("LocalizedVariable needs target_gpu=, the rank that holds the table")
        _check_gpu_id(rest.pop("global_gpu_id"), comm.current())
        return _make_variable(
            f"localized:{int(target)}",
            initial_value,
            trainable,
            name,
            dtype,
            shape,
            initializer,
            rest,
        )


# --- assign / export / incremental_model_dump ------------------------------------------------


def _as_list(value) -> tuple[list, bool]:
    if isinstance(value, (list, tuple)):
        return list(value), True
    return [value], False


def _export_one(var):
    table = local_shard(var)
    if isinstance(table, TableKind):
        return table.export_rows()
    raise TypeError(
        f"export takes sok.Variable and sok.DynamicVariable tables, got {type(var).__name__}"
    )


def export(var):
    """This rank's keys and rows of a table (or of each table of a list), as SOK's `sok.export`.

    Args:
      var: a sok.DynamicVariable or sok.Variable, or a list of them.

    Returns:
      (keys [n] of the table's key dtype (int64 for sok.Variable: global row ids), values
      [n, dim]) for one table; a list of such pairs for a list. Each rank returns the rows it
      holds; sok.assign(var, keys, values) stores them back.

    Raises:
      TypeError: for something that is not a sok_lite table.

    >>> import numpy as np, sok_lite as sok
    >>> keys, values = sok.export(sok.Variable(np.eye(2), dtype="float32"))
    >>> keys.numpy().tolist(), values.numpy().tolist()
    ([0, 1], [[1.0, 0.0], [0.0, 1.0]])
    """
    tables, is_list = _as_list(var)
    pairs = [_export_one(t) for t in tables]
    return pairs if is_list else pairs[0]


def _assign_one(var, keys, values):
    table = local_shard(var)
    if not isinstance(table, TableKind):
        raise TypeError(
            f"assign takes sok.Variable and sok.DynamicVariable tables, got {type(var).__name__}"
        )
    table.assign_rows(keys, values)
    return var


def assign(var, indices, values):
    """Stores rows into a table (or into each table of a list), as SOK's `sok.assign`.

    Each rank stores the rows it holds: what sok.export returned there. For a sok.Variable the
    keys are global row ids, and each must belong to this rank.

    Args:
      var: a sok.DynamicVariable or sok.Variable, or a list of them.
      indices: the keys [n] (a list of them for a list of tables).
      values: the rows [n, dim] (a list of them for a list of tables).

    Returns:
      var.

    Raises:
      TypeError: for something that is not a sok_lite table.
      ValueError: lists of different lengths, or bad key or value dtypes or widths.
      tf.errors.InvalidArgumentError: a sok.Variable key outside the table or of another rank.

    >>> import numpy as np, sok_lite as sok
    >>> table = sok.DynamicVariable(2, initializer="zeros")
    >>> _ = sok.assign(table, [7, 2**40], np.ones([2, 2], np.float32))
    >>> sorted(sok.export(table)[0].numpy().tolist())
    [7, 1099511627776]
    """
    tables, is_list = _as_list(var)
    if is_list:
        indices, values = list(indices), list(values)
        if not len(tables) == len(indices) == len(values):
            raise ValueError(
                f"assign got {len(tables)} tables, {len(indices)} key lists and "
                f"{len(values)} value lists"
            )
    else:
        indices, values = [indices], [values]
    for table, keys, rows in zip(tables, indices, values):
        _assign_one(table, keys, rows)
    return var


def incremental_model_dump(sok_vars, time_threshold, sess=None):
    """The keys and rows changed since an optimizer step, gathered from every rank, as SOK's
    `sok.incremental_model_dump`.

    SOK selects rows by the time they were updated; sok_lite tables record the optimizer step
    instead. Pass the optimizer's `iterations` at the point to dump from: the rows that later
    steps (or sok.assign) changed are returned.

    Args:
      sok_vars: a sok.DynamicVariable or a list of them.
      time_threshold: an optimizer step (int), or a list with one step, or one per table.
      sess: SOK's TF1 session; must be None.

    Returns:
      (keys, values): lists with one NumPy array per table, the rows of every rank.

    Raises:
      TypeError: a datetime threshold (pass the optimizer step), or a table that is not a
        sok.DynamicVariable (see sok.dump(path, tables, optimizer, since_step=k) for
        sok.Variable tables).
      ValueError: a session, or a threshold list whose length is neither 1 nor the tables'.
    """
    if sess is not None:
        raise ValueError("incremental_model_dump runs eagerly here; do not pass a session")
    tables, _ = _as_list(sok_vars)
    steps, _ = _as_list(time_threshold)
    if len(steps) not in (1, len(tables)):
        raise ValueError(
            f"time_threshold has {len(steps)} entries for {len(tables)} tables (give 1 or one "
            "per table)"
        )
    if len(steps) == 1:
        steps = steps * len(tables)
    for step in steps:
        if isinstance(step, (datetime.datetime, datetime.date)):
            raise TypeError(
                "sok_lite tables record the optimizer step of each update, not its time: pass "
                "the optimizer's iterations at the point to dump from (int(optimizer.iterations))"
            )
    communicator = comm.current()
    keys_out, values_out = [], []
    for i, (table, step) in enumerate(zip(tables, steps)):
        shard = local_shard(table)
        if not isinstance(shard, DynamicVariable):
            raise TypeError(
                f"table {i} is a {type(table).__name__}: incremental_model_dump takes "
                "sok.DynamicVariable tables; for sok.Variable use sok.dump(path, tables, "
                "optimizer, since_step=k)"
            )
        keys, values = shard.export(since_step=int(step))
        keys_out.append(communicator.allgather(keys).numpy())
        values_out.append(communicator.allgather(values).numpy())
    return keys_out, values_out


def sparse_read_and_evict(var, indices, name=None):
    """SOK's read of HierarchicalKV ("hybrid") tables that also returns the rows evicted to
    make room. Not supported: sok_lite's tables do not hand evicted rows back.

    Read rows with sok.lookup_sparse (or tf.nn.embedding_lookup on a sok.DynamicVariable);
    bound a table with sok.DynamicVariable(..., capacity=n, evict_policy="lru" | "lfu"), or
    drop rows not looked up lately with table.evict(steps_unseen).

    Raises:
      NotImplementedError: always.
    """
    raise NotImplementedError(
        "sparse_read_and_evict is not supported: sok_lite tables do not return evicted rows. "
        "Read rows with sok.lookup_sparse (or tf.nn.embedding_lookup on a DynamicVariable) and "
        "bound the table with sok.DynamicVariable(..., capacity=n, evict_policy='lru'), or "
        "call table.evict(steps_unseen)"
    )


def all2all_dense_embedding(param, indices):
    """The rows of `param` for every id of `indices`, fetched from the ranks that hold them,
    as SOK's `sok.all2all_dense_embedding`.

    Args:
      param: a sok.Variable or sok.DynamicVariable.
      indices: int32/int64 ids of any shape (global row ids for a sok.Variable).

    Returns:
      [*indices.shape, dim]. The gradient reaches `param` as a tf.IndexedSlices over this
      rank's rows, which any optimizer inside sok.OptimizerScope, sok.OptimizerWrapper or
      sok.SGD applies.

    Raises:
      tf.errors.InvalidArgumentError: an id outside a sok.Variable's rows.

    >>> import numpy as np, tensorflow as tf, sok_lite as sok
    >>> table = sok.Variable(np.arange(8).reshape(4, 2), dtype=tf.float32)
    >>> sok.all2all_dense_embedding(table, tf.constant([[3], [0]])).numpy().tolist()
    [[[6.0, 7.0]], [[0.0, 1.0]]]
    """
    indices = tf.convert_to_tensor(indices)
    flat = tf.reshape(indices, [-1, 1])
    rows = lookup_sparse(param, flat)
    dim = param.shape[-1]
    return tf.reshape(rows, tf.concat([tf.shape(indices), [dim]], axis=0))


# --- SGD -----------------------------------------------------------------------------------


class SGD:
    """SOK's plain sparse SGD: `sok.SGD(lr=...)`; each step subtracts lr * gradient.

    sok.Variable and sok.DynamicVariable tables are updated row by row (only the rows with a
    gradient), other variables as keras.optimizers.SGD does.

    Args:
      lr: the learning rate.

    >>> import numpy as np, tensorflow as tf, sok_lite as sok
    >>> table = sok.Variable(np.ones([3, 2]), dtype=tf.float32)
    >>> grad = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([1], tf.int64))
    >>> opt = sok.SGD(lr=0.5)
    >>> _ = opt.apply_gradients([(grad, table)])
    >>> table.numpy().tolist()
    [[1.0, 1.0], [0.5, 0.5], [1.0, 1.0]]
    """

    def __init__(self, lr):
        self._lr = tf.Variable(lr, dtype=tf.float32, trainable=False, name="learning_rate")
        self._optimizer = OptimizerWrapper(keras.optimizers.SGD(learning_rate=lambda: self._lr))

    @property
    def lr(self) -> tf.Variable:
        """The learning rate, a tf.Variable: `opt.lr.assign(0.1)` changes the next steps."""
        return self._lr

    @property
    def iterations(self):
        """The number of apply_gradients calls so far."""
        return self._optimizer.iterations

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Applies one step: var -= lr * grad for every (grad, var) pair with a gradient.

        global_step and name are SOK's TF1 arguments and are ignored.
        """
        del global_step, name
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if not pairs:
            return None
        return self._optimizer.apply_gradients(pairs)


__all__ = [
    "tf_version",
    "raw_ops",
    "communication",
    "set_comm_tool",
    "DistributedVariable",
    "LocalizedVariable",
    "assign",
    "export",
    "incremental_model_dump",
    "sparse_read_and_evict",
    "all2all_dense_embedding",
    "SGD",
]
