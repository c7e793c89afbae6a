"""Communicator backends and the process-wide choice among them (sok_lite.init).

local: one process, one rank. horovod: one rank per Horovod process. strategy: one rank per
replica of the tf.distribute strategy in scope (MirroredStrategy: several in one process;
MultiWorkerMirroredStrategy: one or more per worker process).
"""

import tensorflow as tf

from sok_lite.comm.base import Communicator
from sok_lite.comm.local import LocalCommunicator

_BACKENDS = ("auto", "horovod", "strategy", "local")
# Other spellings that SOK code uses for a backend.
_ALIASES = {"hvd": "horovod", "single": "local"}
_current: Communicator | None = None


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
      ValueError: for an unknown backend name, or `comm` and `comm_tool` naming different ones.
      ImportError: "horovod" without Horovod installed.
    """
    global _current
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
    if comm == "strategy":
        from sok_lite.comm.strategy import StrategyCommunicator

        _current = StrategyCommunicator(tf.distribute.get_strategy())
    elif comm == "horovod":
        from sok_lite.comm.horovod import HorovodCommunicator

        _current = HorovodCommunicator()
    else:
        _current = LocalCommunicator()
    return _current


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


__all__ = ["Communicator", "LocalCommunicator", "init", "current", "rank", "num_ranks"]
