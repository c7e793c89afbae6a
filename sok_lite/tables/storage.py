"""Where a DynamicVariable keeps its rows: `sok.storage.Disk(path, ram_budget)` bounds the RAM a
table's rows take and keeps the rest in a file under `path` (one directory per table and rank).

The file is a cache, not a checkpoint: it is created empty with the table and means nothing
after the process ends; `sok.dump` / `sok.load` save and restore a table (both tiers). It is
removed, with its directory, when the table is deleted or the process exits (see
`release_when_deleted`); a process that is killed leaves it, and the next table of that name
under that path truncates it.
"""

from __future__ import annotations

import atexit
import dataclasses
import numbers
import os
import re
import tempfile
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tensorflow as tf

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})


def parse_bytes(value: object, what: str = "the value") -> int:
    """A byte count >= 0 from an int or a string such as "2GiB", "512MiB", "1.5GB" or "4096".

    Args:
      value: an int (a NumPy integer too) or a string: a number and an optional unit (B, KB,
        MB, GB, TB in powers of 10; KiB, MiB, GiB, TiB in powers of 2).
      what: what the value is, for the messages ("ram_budget").

    Raises:
      ValueError: naming `what`, for a negative count, a bool, None or any other type, or a
        string that is not a size. Callers that need a count >= 1, or take None, check that
        themselves.

    >>> parse_bytes("1.5KiB"), parse_bytes(0)
    (1536, 0)
    """
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        count = int(value)
    elif isinstance(value, str):
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise ValueError(
                f"{what} {value!r} is not a size: give bytes or a string such as '2GiB' or '512MiB'"
            )
        count = int(float(match.group(1)) * _UNITS[unit])
    else:
        raise ValueError(f"{what} must be an int or a string like '2GiB', got {value!r}")
    if count < 0:
        raise ValueError(f"{what} must be >= 0 bytes, got {value!r}")
    return count


@dataclasses.dataclass(frozen=True)
class Disk:
    """A RAM tier bounded by `ram_budget` bytes over a disk tier in directory `path`.

    `ram_budget` bounds every byte a table keeps in RAM for its rows on each rank: the index of
    the rows on disk, ~8 bytes for every key the rank stores (16-32 up to 32,768 keys), comes
    first, then the rows in RAM (value, optimizer slots, bookkeeping) and their hash index.
    Size it for the keys with `sok.plan_memory`, which warns when too few rows would stay in
    RAM.
    When it is reached, a lookup moves the least recently used rows to a file of fixed-size
    records under `<path>/<table name>.rank<r>`; looking a key up again brings its row back.
    Nothing is dropped (unlike `capacity`).

    >>> import sok_lite as sok
    >>> sok.storage.Disk("/tmp/emb", ram_budget="64MiB").ram_budget
    67108864
    """

    path: str
    ram_budget: int

    def __init__(self, path: str | os.PathLike[str], ram_budget: int | str) -> None:
        if not isinstance(path, (str, os.PathLike)) or not str(path):
            raise ValueError(f"storage.Disk needs a directory path, got {path!r}")
        object.__setattr__(self, "path", os.fspath(path))
        budget = parse_bytes(ram_budget, "ram_budget")
        if budget < 1:
            raise ValueError(f"ram_budget must be at least 1 byte, got {ram_budget!r}")
        object.__setattr__(self, "ram_budget", budget)


def disk_of(storage: object, label: str) -> Disk | None:
    """A Disk from a Disk or a dict of its fields (as a saved config holds it, {"path": ...,
    "ram_budget": ...}); None stays None.

    Raises:
      ValueError: starting with `label`, for anything else or a dict a Disk refuses.
    """
    if storage is None or isinstance(storage, Disk):
        return storage
    if not isinstance(storage, dict) or set(storage) != {"path", "ram_budget"}:
        raise ValueError(
            f"{label}: storage must be None, sok.storage.Disk(path, ram_budget) or a dict "
            f'{{"path": ..., "ram_budget": ...}}, got {storage!r}'
        )
    try:
        return Disk(storage["path"], storage["ram_budget"])
    except ValueError as e:
        raise ValueError(f"{label}: {e}") from None


# Directories this process gave to tables: a second table of the same name gets its own.
_used_dirs: set[str] = set()


def table_dir(storage: Disk, table_name: str, rank: int) -> str:
    """A fresh directory for one table's disk tier on this rank, checked writable.

    Raises:
      ValueError: naming the table and the path, when it cannot be created or written.
    """
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", table_name) or "table"
    base = os.path.join(os.path.abspath(storage.path), f"{safe}.rank{rank}")
    directory, n = base, 1
    while directory in _used_dirs:
        directory, n = f"{base}.{n}", n + 1
    try:
        os.makedirs(directory, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as e:
        raise ValueError(
            f"DynamicVariable '{table_name}': cannot use '{directory}' for its disk tier "
            f"(storage.Disk path '{storage.path}'): {e.strerror or e}"
        ) from None
    _used_dirs.add(directory)
    return directory


# The files a disk tier writes in its directory (kernels/core/hash_table_tier_file.cc, and
# hash_table_swap.cc's name for a file being swapped).
TIER_FILES = ("rows.bin", "rows.bin.swap", "rows.bin.widen")
_exiting = False


def remove_tier_dir(directory: str) -> None:
    """Removes a disk tier's files, then its directory if that left it empty: nothing else."""
    for name in TIER_FILES:
        try:
            os.remove(os.path.join(directory, name))
        except FileNotFoundError:
            pass
    try:
        os.rmdir(directory)
    except OSError:
        pass


def release_when_deleted(table: object, directory: str, handle: tf.Tensor) -> None:
    """Frees `table`'s disk tier when the table is deleted: its resource (RAM and the open file)
    and its directory. At exit only the files go (the process closes the file itself)."""
    weakref.finalize(table, _release, directory, handle)
    # Registered (again) after weakref's own exit hook, so that it runs before it.
    atexit.unregister(_mark_exiting)
    atexit.register(_mark_exiting)


def _mark_exiting() -> None:
    global _exiting
    _exiting = True


def destroy_table(handle: tf.Tensor) -> None:
    """Frees a table resource (its rows and open tier file), eagerly: out of any function being
    traced (a collector may run inside one), so that the op never lands in its graph."""
    import tensorflow as tf

    with tf.init_scope(), tf.device(handle.device):
        tf.raw_ops.DestroyResourceOp(resource=handle, ignore_lookup_error=True)


def _release(directory: str, handle: tf.Tensor) -> None:
    if not _exiting:
        try:
            destroy_table(handle)
        except Exception:  # noqa: BLE001 -- a finalizer must not raise; the files go anyway
            pass
    remove_tier_dir(directory)
    _used_dirs.discard(directory)
