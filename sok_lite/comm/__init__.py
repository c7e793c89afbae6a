"""Communicator backends and the process-wide choice among them (sok_lite.init)."""

from sok_lite.comm.base import Communicator
from sok_lite.comm.local import LocalCommunicator

_BACKENDS = ("auto", "local")
_current: Communicator | None = None


def init(comm: str = "auto") -> Communicator:
    """Chooses the communicator of this process and returns it.

    Args:
      comm: "auto" or "local". "auto" picks the local (single-process) backend when no
        distributed engine is active. Other backends ("horovod", "strategy") are planned.

    Returns:
      The active Communicator.

    Raises:
      ValueError: for an unknown backend name.
    """
    global _current
    if comm not in _BACKENDS:
        raise ValueError(f"unknown communicator {comm!r}; expected one of {_BACKENDS}")
    _current = LocalCommunicator()
    return _current


def current() -> Communicator:
    """The communicator chosen by init(); the local one if init() was never called."""
    return _current if _current is not None else init("local")


def rank() -> int:
    return current().rank


def num_ranks() -> int:
    return current().num_ranks


__all__ = ["Communicator", "LocalCommunicator", "init", "current", "rank", "num_ranks"]
