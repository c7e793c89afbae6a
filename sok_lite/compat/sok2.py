"""The rest of SOK 2.x's top-level names, on sok_lite's tables and communicators.

`import sok_lite as sok` then finds them where SOK code looks: sok.tf_version, sok.raw_ops,
sok.communication, sok.set_comm_tool, sok.DistributedVariable, sok.LocalizedVariable,
sok.assign, sok.export, sok.incremental_model_dump, sok.sparse_read_and_evict,
sok.all2all_dense_embedding and sok.SGD. docs/migration_from_sok.md says how each compares.
"""

import datetime
import re
from collections.abc import Iterable
from typing import NoReturn, TypeAlias, TypeVar

import keras
import numpy as np
import numpy.typing as npt
import tensorflow as tf

from sok_lite import comm
from sok_lite.comm import communication
from sok_lite.comm.shards import local_shard
from sok_lite.compat.sok2_variables import DistributedVariable, LocalizedVariable
from sok_lite.lookup.sparse import Table, lookup_sparse
from sok_lite.optim.optimizer import OptimizerWrapper
from sok_lite.optim.row_wise import GradAndVar
from sok_lite.tables.dynamic import DynamicTable
from sok_lite.tables.table_kind import TableKind


class _VersionList(list[int]):
    """The running TensorFlow's version as a list of ints, as SOK's `sok.tf_version`:
    [2, 21, 0] for TensorFlow 2.21.0 (a suffix such as "rc1" is dropped)."""


def _leading_int(part: str) -> int:
    """The number a version part starts with, 0 for none ("0rc1" -> 0)."""
    digits = re.match(r"\d+", part)
    return int(digits.group()) if digits else 0


tf_version = _VersionList(_leading_int(part) for part in tf.__version__.split("."))


class _RawOps:
    """sok_lite's op library, as SOK's `sok.raw_ops` is SOK's: attribute access loads it
    on first use (importing sok_lite does not). The ops are sok_lite's own (named
    `sok_lite_*`), not SOK's; most code needs only the public functions."""

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):  # introspection must not load the library
            raise AttributeError(name)
        from sok_lite import _loader

        return getattr(_loader.ops(), name)

    def __dir__(self) -> list[str]:
        from sok_lite import _loader

        return dir(_loader.ops())

    def __repr__(self) -> str:
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


# --- assign / export / incremental_model_dump ------------------------------------------------


_T = TypeVar("_T")
# One value or a list (or tuple) of them, as SOK's functions take tables, keys and steps.
_OneOrList: TypeAlias = _T | list[_T] | tuple[_T, ...]
# (keys [n], values [n, dim]) of one table.
_Rows: TypeAlias = tuple[tf.Tensor, tf.Tensor]


def _as_list(value: _OneOrList[_T]) -> tuple[list[_T], bool]:
    if isinstance(value, (list, tuple)):
        return list(value), True
    return [value], False


def _export_one(var: Table) -> _Rows:
    table = local_shard(var)
    if isinstance(table, TableKind):
        return table.export_rows()
    raise TypeError(
        f"export takes sok.Variable and sok.DynamicVariable tables, got {type(var).__name__}"
    )


def export(var: _OneOrList[Table]) -> _Rows | list[_Rows]:
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


def _assign_one(var: Table, keys: tf.Tensor, values: tf.Tensor) -> Table:
    table = local_shard(var)
    if not isinstance(table, TableKind):
        raise TypeError(
            f"assign takes sok.Variable and sok.DynamicVariable tables, got {type(var).__name__}"
        )
    table.assign_rows(keys, values)
    return var


def assign(
    var: _OneOrList[Table],
    indices: _OneOrList[tf.Tensor],
    values: _OneOrList[tf.Tensor],
) -> _OneOrList[Table]:
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


def incremental_model_dump(
    sok_vars: _OneOrList[Table], time_threshold: _OneOrList[int], sess: object = None
) -> tuple[list[npt.NDArray[np.generic]], list[npt.NDArray[np.generic]]]:
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
    keys_out: list[npt.NDArray[np.generic]] = []
    values_out: list[npt.NDArray[np.generic]] = []
    for i, (table, step) in enumerate(zip(tables, steps)):
        shard = local_shard(table)
        if not isinstance(shard, DynamicTable):
            raise TypeError(
                f"table {i} is a {type(table).__name__}: incremental_model_dump takes "
                "sok.DynamicVariable tables; for sok.Variable use sok.dump(path, tables, "
                "optimizer, since_step=k)"
            )
        keys, values = shard.export(since_step=int(step))
        keys_out.append(communicator.allgather(keys).numpy())
        values_out.append(communicator.allgather(values).numpy())
    return keys_out, values_out


def sparse_read_and_evict(var: Table, indices: tf.Tensor, name: str | None = None) -> NoReturn:
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


def all2all_dense_embedding(param: Table, indices: tf.Tensor) -> tf.Tensor:
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

    def __init__(self, lr: float) -> None:
        self._lr = tf.Variable(lr, dtype=tf.float32, trainable=False, name="learning_rate")
        self._optimizer = OptimizerWrapper(keras.optimizers.SGD(learning_rate=lambda: self._lr))

    @property
    def lr(self) -> tf.Variable:
        """The learning rate, a tf.Variable: `opt.lr.assign(0.1)` changes the next steps."""
        return self._lr

    @property
    def iterations(self) -> tf.Variable:
        """The number of apply_gradients calls so far."""
        return self._optimizer.iterations

    def apply_gradients(
        self,
        grads_and_vars: Iterable[GradAndVar],
        global_step: object = None,
        name: str | None = None,
    ) -> tf.Operation | None:
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
