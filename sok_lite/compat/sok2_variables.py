"""SOK 2.x's table classes, sok.DistributedVariable and sok.LocalizedVariable, on sok_lite's
tables (constructors that return a sok_lite table; isinstance checks a table's placement)."""

import inspect
from collections.abc import Callable
from typing import ClassVar, Protocol

import numpy as np
import tensorflow as tf

from sok_lite import comm
from sok_lite.comm.base import Communicator
from sok_lite.comm.shards import ReplicaShards
from sok_lite.tables.variable import ShapeLike, Variable


def _table_of(obj: object) -> Variable | None:
    """The sok_lite.Variable behind obj (a ReplicaShards stands for its shards), or None."""
    if isinstance(obj, ReplicaShards):
        obj = obj.shards[0]
    return obj if isinstance(obj, Variable) else None


class _SokVariableClass(Protocol):
    """What _TableKind asks of a class it makes, besides an __init__ with SOK's signature: the
    table mode that the class's own argument and global_gpu_id give (each checked against the
    job), and the test of a table's mode."""

    # The argument the class adds after _SOK_ARGS (its __init__ is _sok_init(_OWN_ARG)).
    _OWN_ARG: ClassVar[str]

    @staticmethod
    def _mode(own: int | None, global_gpu_id: object, /) -> str: ...

    @staticmethod
    def _is_mode(mode: str) -> bool: ...


class _TableKind(type):
    """Makes a SOK variable class build a sok_lite.Variable with SOK's signature (that of the
    class's __init__), and `isinstance` recognise a sok_lite.Variable of the class's mode."""

    def __call__(cls: type[_SokVariableClass], *args: object, **kwargs: object) -> Variable:
        bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        del arguments["self"]
        mode = cls._mode(arguments.pop(cls._OWN_ARG), arguments.pop("global_gpu_id"))
        return _make_variable(mode, **arguments)

    def __instancecheck__(cls: type[_SokVariableClass], obj: object) -> bool:
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


def _make_variable(
    mode: str,
    initial_value: object,
    trainable: bool | None,
    name: str | None,
    dtype: tf.DType | str | None,
    shape: ShapeLike | None,
    initializer: object,
    **others: object,
) -> Variable:
    for arg in _UNSUPPORTED:
        if others.get(arg) is not None:
            raise ValueError(
                f"{arg}={others[arg]!r} is not supported for sok_lite tables; create the "
                "table with sok.Variable(value, mode=...)"
            )
    if initial_value is not None:
        if not callable(initial_value):
            # A tensor or an array (tf.Tensor is untyped: both read as one).
            value: tf.Tensor = (
                initial_value if tf.is_tensor(initial_value) else np.asarray(initial_value)
            )
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


def _sok_init(last: str) -> Callable[..., None]:
    """An __init__ that carries SOK's signature, _SOK_ARGS then `last`, for the metaclass to
    bind the arguments of a call with (it builds the table itself)."""

    def __init__(self: object, *args: object, **kwargs: object) -> None:
        raise AssertionError("built by the metaclass")  # pragma: no cover

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter("self", kind)]
    for name in (*_SOK_ARGS, last):
        default = True if name == "validate_shape" else None
        params.append(inspect.Parameter(name, kind, default=default))
    # inspect reads a function's __signature__: an attribute, kept in the function's __dict__.
    __init__.__dict__["__signature__"] = inspect.Signature(params)
    return __init__


def _check_rank(what: str, given: object, actual: int) -> None:
    if given is not None and given != actual:
        raise ValueError(f"{what}={given} but this job's is {actual}")


def _check_gpu_id(given: object, communicator: Communicator) -> None:
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

    _OWN_ARG = "num_gpus"
    __init__ = _sok_init(_OWN_ARG)

    @staticmethod
    def _is_mode(mode: str) -> bool:
        return mode == "distributed"

    @staticmethod
    def _mode(num_gpus: int | None, global_gpu_id: object) -> str:
        communicator = comm.current()
        _check_rank("num_gpus", num_gpus, communicator.num_ranks)
        _check_gpu_id(global_gpu_id, communicator)
        return "distributed"


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

    _OWN_ARG = "target_gpu"
    __init__ = _sok_init(_OWN_ARG)

    @staticmethod
    def _is_mode(mode: str) -> bool:
        return mode.startswith("localized")

    @staticmethod
    def _mode(target_gpu: int | None, global_gpu_id: object) -> str:
        if target_gpu is None:
            raise TypeError("LocalizedVariable needs target_gpu=, the rank that holds the table")
        _check_gpu_id(global_gpu_id, comm.current())
        return f"localized:{int(target_gpu)}"
