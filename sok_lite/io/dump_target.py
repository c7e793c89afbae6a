"""Where sok.dump writes: the checks that keep it from replacing anything it did not write, and
the atomic replacement of a previous checkpoint.

A dump is written into `<path>.tmp`, a directory marked as sok_lite's by a MARKER file, and
becomes `<path>` in one step: a rename onto a missing path or an empty directory, or an atomic
exchange with the previous checkpoint (Linux renameat2 RENAME_EXCHANGE) whose files are then
removed. Where the file system cannot exchange, the previous checkpoint is renamed to a fresh
`<path>.old-*` name first. Nothing is removed that the manifest (or the marker) does not show
to be a dump's.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import pathlib
import re
import uuid

MARKER = ".sok_lite_dump"  # first file of a dump's directory: "written by sok.dump"
# The names a dump writes (manifest.json last: a directory without it is incomplete).
_DUMP_FILE = re.compile(r"(t\d+\.r\d+\.(ids|rows)|rank\d+\.json|manifest\.json|\.sok_lite_dump)")


def check_target(final: pathlib.Path, checkpoint_format: str) -> None:
    """Refuses a dump to `final` unless it is missing, an empty directory or a previous
    sok_lite checkpoint holding only its own files, and unless `final`.tmp is missing or a
    dump's leftover.

    Raises:
      ValueError: naming the path and why; nothing has been moved or deleted.
    """
    if final.is_symlink() or (final.exists() and not final.is_dir()):
        raise ValueError(
            f"sok.dump: '{final}' exists and is not a directory: refusing to replace it "
            "(dump to a new path, or remove it first)"
        )
    if final.is_dir() and any(final.iterdir()):
        foreign = _foreign_files(final, checkpoint_format)
        if foreign:
            raise ValueError(
                f"sok.dump: '{final}' is a directory that is not a sok_lite checkpoint "
                f"(it holds {foreign[:3]}): refusing to replace it; dump to a new path, or "
                "remove it first"
            )
    tmp = staging_path(final)
    # An empty one is taken too: a dump killed between creating it and marking it leaves it,
    # and removing an empty directory loses nothing.
    if tmp.is_symlink() or (tmp.exists() and not (_is_dump_dir(tmp) or _is_empty_dir(tmp))):
        raise ValueError(
            f"sok.dump: '{tmp}', where the dump is written before it replaces '{final}', "
            "exists and was not written by sok.dump: refusing to replace it"
        )


def staging_path(final: pathlib.Path) -> pathlib.Path:
    return final.with_name(final.name + ".tmp")


def make_staging(tmp: pathlib.Path) -> None:
    """A fresh, marked directory at tmp (a leftover of a failed dump is removed first)."""
    if tmp.exists():
        remove_dump_dir(tmp)
    tmp.mkdir(parents=True)
    (tmp / MARKER).write_bytes(b"")


def remove_dump_dir(path: pathlib.Path) -> None:
    """Removes the files a dump writes from `path`, then `path` if that left it empty.

    The marker goes last: a process killed midway leaves a directory the next dump still
    recognises as a dump's leftover (marked, or empty), never an unmarked one it must refuse.
    """
    files = [f for f in path.iterdir() if f.is_file() and _DUMP_FILE.fullmatch(f.name)]
    for f in sorted(files, key=lambda f: f.name == MARKER):
        f.unlink()
    try:
        path.rmdir()
    except OSError:
        pass


def replace(tmp: pathlib.Path, final: pathlib.Path) -> None:
    """Makes the complete dump at tmp the checkpoint at final, in one step."""
    if not final.exists() or not any(final.iterdir()):
        os.rename(tmp, final)  # onto nothing, or an empty directory: atomic
    elif _exchange(tmp, final):
        # tmp now holds the previous checkpoint (maybe written before dumps were marked): mark
        # it first, so that a kill while its files go leaves a leftover the next dump takes.
        (tmp / MARKER).touch()
        remove_dump_dir(tmp)
    else:
        old = final.with_name(f"{final.name}.old-{uuid.uuid4().hex[:8]}")
        os.rename(final, old)
        os.rename(tmp, final)
        remove_dump_dir(old)
    _sync_dir(final.parent)


def _is_empty_dir(path: pathlib.Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def _is_dump_dir(path: pathlib.Path) -> bool:
    return path.is_dir() and (path / MARKER).is_file() and not _foreign_files(path, None)


def _foreign_files(path: pathlib.Path, checkpoint_format: str | None) -> list[str]:
    """Entries of `path` a dump did not write (all of them, when checkpoint_format is given
    and path's manifest is not of that format)."""
    names = sorted(f.name for f in path.iterdir())
    if checkpoint_format is not None and not _has_manifest(path, checkpoint_format):
        return names
    return [n for n in names if not (_DUMP_FILE.fullmatch(n) and (path / n).is_file())]


def _has_manifest(path: pathlib.Path, checkpoint_format: str) -> bool:
    try:
        manifest = json.loads((path / "manifest.json").read_text())
        return bool(manifest.get("format") == checkpoint_format)
    except (OSError, ValueError, AttributeError):
        return False


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: pathlib.Path, b: pathlib.Path) -> bool:
    """Swaps two directories atomically; False where the system or file system cannot."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _sync_dir(path: pathlib.Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
