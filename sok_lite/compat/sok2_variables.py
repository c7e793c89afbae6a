"""SOK 2.x's table classes, sok.DistributedVariable and sok.LocalizedVariable, on sok_lite's
tables (constructors that return a sok_lite table; isinstance checks a table's placement)."""

import inspect

import numpy as np
import tensorflow as tf

from sok_lite import comm
from sok_lite.comm.shards import ReplicaShards
from sok_lite.tables.variable import Variable


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


# The arguments both of SOK's classes take, in SOK's order (tf.Variable's, then the ranks'),
# each None by default but validate_shape; each class adds its own last one.
_SOK_ARGS = (
    "initial_value",
    "trainable",
    "collections",
    "validate_shape",
    "caching_device",
    "name",
    "dtype",
    "variable_def",
    "import_scope",
    "constraint",
    "distribute_strategy",
    "synchronization",
    "aggregation",
    "shape",
    "initializer",
    "global_gpu_id",
)
# Those that make the table (global_gpu_id is checked against the rank, validate_shape ignored).
_TAKEN = (
    "initial_value",
    "trainable",
    "validate_shape",
    "name",
    "dtype",
    "shape",
    "initializer",
    "global_gpu_id",
)
# tf.Variable arguments of SOK's classes that a sok_lite table cannot honour unless left unset.
_UNSUPPORTED = tuple(arg for arg in _SOK_ARGS if arg not in _TAKEN)


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


def _sok_init(last: str):
    """An __init__ that carries SOK's signature, _SOK_ARGS then `last`, for the metaclass to
    bind the arguments of a call with (it builds the table itself)."""

    def __init__(self, *args, **kwargs):
        raise AssertionError("built by the metaclass")  # pragma: no cover

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter("self", kind)]
    for name in (*_SOK_ARGS, last):
        default = True if name == "validate_shape" else None
        params.append(inspect.Parameter(name, kind, default=default))
    # inspect reads a function's __signature__, which the checker's function type lacks.
    __init__.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return __init__


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

    __init__ = _sok_init("num_gpus")

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

    __init__ = _sok_init("target_gpu")

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
