"""Communicator backends and the process-wide choice among them (sok_lite.init).

local: one process, one rank. horovod: one rank per Horovod process. strategy: one rank per
replica of the tf.distribute strategy in scope (MirroredStrategy: several in one process;
MultiWorkerMirroredStrategy: one or more per worker process).
"""

import gc
import itertools
import weakref
from typing import TypeVar

import tensorflow as tf

from sok_lite.comm.base import Communicator
from sok_lite.comm.local import LocalCommunicator

_BACKENDS = ("auto", "horovod", "strategy", "local")
# Other spellings that SOK code uses for a backend.
_ALIASES = {"hvd": "horovod", "single": "local"}
_current: Communicator | None = None
# What init() chose: the backend, and for "strategy" the strategy (a different one is another
# communicator).
_chosen: tuple[str, object] = ("", None)
# The tables created under the current communicator that are still alive: their shards follow
# its ranks, so it may not change under them.
_tables: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()
_table_numbers = itertools.count()
# Named in an error, at most.
_NAMES_SHOWN = 10


def init(
    comm: str = "auto",
    use_legacy_optimizer: bool | None = None,
    *,
    comm_tool: str | None = None,
) -> Communicator:
    """Chooses the communicator of this process and returns it.

    Call it before creating sok_lite variables: their shards follow the rank and size chosen here.
    The SOK 2.x forms `sok.init()`, `sok.init("horovod")`, `sok.init(comm_tool="horovod")` and
    `sok.init(comm_tool="horovod", use_legacy_optimizer=False)` all work.

    A table created before init() (or any other call that needs the communicator, such as
    sok.rank()) runs init("auto") first. Calling init() again with the backend already chosen
    (after "auto" resolves; for "strategy", the same strategy) changes nothing and returns the
    same communicator. Choosing another one is allowed while no table created under the
    current one is alive, and is a ValueError naming them otherwise: those tables hold the
    shards of the current communicator's ranks.

    Args:
      comm: "auto", "horovod" (or "hvd"), "strategy" or "local" (or "single"). "auto" picks
        Horovod when horovod.tensorflow is initialized (hvd.init() has run), else the
        tf.distribute strategy in scope (call init inside `strategy.scope()`), else the local
        single-process backend. "horovod" calls hvd.init() if needed. "strategy" uses the
        strategy in scope: each replica is a rank (rank = its replica id in the sync group,
        num_ranks = num_replicas_in_sync), for MirroredStrategy (several replicas in this
        process; each table then holds one shard per replica, see sok_lite.comm.shards) and
        MultiWorkerMirroredStrategy. Lookups and optimizer steps then run inside
        `strategy.run`.
      use_legacy_optimizer: SOK 2.x's switch to the legacy tf.keras optimizers. Accepted and
        ignored: sok_lite works with Keras 3 optimizers (and tf_keras ones) as they are.
      comm_tool: SOK 2.x's name for `comm`, with the same values.

    Returns:
      The active Communicator.

    Raises:
      ValueError: for an unknown backend name, `comm` and `comm_tool` naming different ones, or
        another backend than the current one while tables created under it are alive.
      ImportError: "horovod" without Horovod installed.
    """
    global _current, _chosen
    del use_legacy_optimizer  # SOK's option; nothing to switch here
    comm = _ALIASES.get(comm, comm)
    if comm_tool is not None:
        comm_tool = _ALIASES.get(comm_tool, comm_tool)
        if comm not in ("auto", comm_tool):
            raise ValueError(f"init() got comm={comm!r} and comm_tool={comm_tool!r}; pass one")
        comm = comm_tool
    if comm not in _BACKENDS:
        raise ValueError(
            f"unknown communicator {comm!r}; expected one of {_BACKENDS} "
            f"(or the aliases {tuple(_ALIASES)})"
        )
    if comm == "auto":
        from sok_lite.comm.horovod import horovod_is_initialized

        if horovod_is_initialized():
            comm = "horovod"
        elif tf.distribute.has_strategy():
            comm = "strategy"
        else:
            comm = "local"
    chosen = (comm, tf.distribute.get_strategy() if comm == "strategy" else None)
    if _current is not None:
        if _chosen[0] == chosen[0] and _chosen[1] is chosen[1]:
            return _current  # already chosen: nothing changes
        _refuse_with_tables(comm)
    communicator: Communicator
    if comm == "strategy":
        from sok_lite.comm.strategy import StrategyCommunicator

        communicator = StrategyCommunicator(chosen[1])
    elif comm == "horovod":
        from sok_lite.comm.horovod import HorovodCommunicator

        communicator = HorovodCommunicator()
    else:
        communicator = LocalCommunicator()
    _current, _chosen = communicator, chosen
    _tables.clear()
    return _current


def _refuse_with_tables(comm: str) -> None:
    """Raises ValueError if tables created under the current communicator are still alive."""
    if not _tables:
        return
    gc.collect()  # tables only kept by reference cycles do not count
    names = [name for name in map(_table_name, list(_tables.values())) if name is not None]
    if not names:
        return
    shown = ", ".join(repr(n) for n in names[:_NAMES_SHOWN])
    if len(names) > _NAMES_SHOWN:
        shown += f" and {len(names) - _NAMES_SHOWN} more"
    backend, _ = _chosen
    ranks = None if _current is None else _current.num_ranks
    raise ValueError(
        f"init({comm!r}): {len(names)} table(s) were created under the {backend!r} "
        f"communicator ({ranks} rank(s)) and hold its shards: {shown}. Call "
        "sok.init() before creating any table (for Horovod after hvd.init(), for a "
        "tf.distribute strategy inside strategy.scope()), or drop those tables first"
    )


def _table_name(table) -> str | None:
    """The table's name; None for an object whose construction failed (not a table)."""
    try:
        return table.name
    except Exception:  # noqa: BLE001 -- a half-made variable fails in its own ways
        return None


_T = TypeVar("_T")


def register_table(table: _T) -> _T:
    """Records `table` (a new sok_lite table, or one shard of it) as created under the current
    communicator, which init() then refuses to replace while it is alive. Returns `table`."""
    current()
    _tables[next(_table_numbers)] = table
    return table


def current() -> Communicator:
    """The communicator chosen by init(); init("auto") on first use if it was never called."""
    return _current if _current is not None else init("auto")


def rank() -> int:
    """This rank: the process's, or under tf.distribute the running replica's.

    Raises:
      RuntimeError: under a strategy with several replicas in this process, outside
        strategy.run (see current().local_ranks).
    """
    return current().rank


def num_ranks() -> int:
    """The number of ranks in the job."""
    return current().num_ranks


__all__ = [
    "Communicator",
    "LocalCommunicator",
    "init",
    "current",
    "rank",
    "num_ranks",
    "register_table",
]
