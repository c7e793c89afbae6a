"""Applies sok_lite deltas to a served model: TensorFlow, NumPy and the standard library only.

This module imports nothing of sok_lite: copy it next to a model exported with
`sok_lite.export_saved_model(..., updatable=True)` and use it where sok_lite is not installed:

    model = tf.saved_model.load("served")
    updater = delta_updater.DeltaUpdater(model, "deltas")
    updater.start(poll_seconds=5)  # a thread applying new deltas as they appear
    updater.status()               # sequence, lag_deltas, lag_seconds, error

The format: docs/checkpoint_format.md, "Deltas". The model takes delta n + 1 after delta n, a
snapshot after any delta before it, and skips a delta it has; a gap, another model's delta or
a damaged file is refused (DeltaError) before the model changes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import tensorflow as tf

FORMAT = "sok_lite.delta"
VERSION = 1
HEADER = "header.json"
APPLY_SIGNATURE = "apply_delta"
STATE_SIGNATURE = "delta_state"
# delta-000000000012, snapshot-000000000040: complete deltas (a delta is written under a
# hidden temporary name and renamed to one of these once every file is on disk).
_NAME = re.compile(r"(delta|snapshot)-(\d{12})")
# A rows file's element type: float64 for float64 tables, else float32 (16-bit ones widened).
_ROW_FILE_DTYPES = {"float64": "<f8", "float32": "<f4", "bfloat16": "<f4", "float16": "<f4"}
KEY_FILE_DTYPES = ("<i8", "<u4")  # uint32: offsets from the file's base, keys within 2^32


class DeltaError(ValueError):
    """A delta that cannot be applied: damaged, incomplete, out of order or of another model.
    Nothing has changed when it is raised."""


def delta_name(sequence: int, snapshot: bool) -> str:
    """The directory name of delta `sequence`."""
    return f"{'snapshot' if snapshot else 'delta'}-{sequence:012d}"


def header_checksum(header: Mapping[str, object]) -> str:
    """The SHA-256 of a header's fields other than "checksum", as canonical JSON."""
    fields = {k: v for k, v in header.items() if k != "checksum"}
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def table_files(t: int, rank: int) -> tuple[str, str, str]:
    """The keys, rows and deleted-keys files of table t written by `rank`."""
    return f"t{t}.r{rank}.keys", f"t{t}.r{rank}.rows", f"t{t}.r{rank}.deleted"


def row_file_dtype(table_dtype: str) -> np.dtype[np.floating]:
    """The element type of a table's rows files."""
    return np.dtype(_ROW_FILE_DTYPES[table_dtype])


@dataclasses.dataclass(frozen=True)
class TableInfo:
    """A table as a header (and the model's state signature) describes it."""

    name: str
    kind: str  # "static" or "hash"
    dim: int
    dtype: str  # the table's storage dtype


@dataclasses.dataclass(frozen=True)
class FileInfo:
    """A file of a delta as its header lists it: its size, entries (keys or rows), element
    type (a NumPy dtype string), the base its keys are offsets from (0: none) and hash."""

    size: int
    count: int
    sha256: str
    dtype: str
    base: int


@dataclasses.dataclass(frozen=True)
class DeltaHeader:
    """A delta's header.json, checked."""

    model_id: str
    sequence: int
    snapshot: bool
    base_step: int  # the optimizer step the previous delta covered up to
    step: int  # the step this delta brings the tables to
    created: float  # when it was written (seconds since the epoch)
    world_size: int  # the ranks that wrote files
    tables: list[TableInfo]
    files: dict[str, FileInfo]


_T = TypeVar("_T")
Clock = Callable[[], float]
Signature = Callable[..., Mapping[str, tf.Tensor]]  # a loaded SavedModel's signature


class _Fields:
    """Typed reads of a parsed JSON object that collect the names of the bad fields."""

    def __init__(self, raw: dict[str, object], prefix: str = "") -> None:
        self.raw, self.prefix = raw, prefix
        self.problems: list[str] = []

    def get(self, key: str, kind: type[_T], default: _T, ok: Callable[[_T], bool] = bool) -> _T:
        """raw[key] if it is a `kind` (a bool is no int) that `ok` accepts, else `default`
        (and the key is noted as bad)."""
        value = self.raw.get(key)
        if isinstance(value, kind) and isinstance(value, bool) == (kind is bool) and ok(value):
            return value
        self.problems.append(self.prefix + key)
        return default

    def integer(self, key: str, low: int = 0) -> int:
        return self.get(key, int, low, lambda v: v >= low)

    def objects(self, key: str) -> list[dict[str, object]]:
        found = self.get(key, list, [], lambda v: all(isinstance(x, dict) for x in v))
        return [x for x in found if isinstance(x, dict)]

    def named_objects(self, key: str) -> dict[str, dict[str, object]]:
        found = self.get(key, dict, {}, lambda v: all(isinstance(x, dict) for x in v.values()))
        return {k: x for k, x in found.items() if isinstance(x, dict)}


def parse_header(raw: dict[str, object], where: object) -> DeltaHeader:
    """The typed header of a parsed header.json.

    Raises:
      DeltaError: a field a reader uses is missing or not of the type a writer gives it.
    """
    fields = _Fields(raw)
    tables = []
    for i, t in enumerate(fields.objects("tables")):
        table = _Fields(t, f"tables[{i}].")
        tables.append(
            TableInfo(
                table.get("name", str, ""),
                table.get("kind", str, "", lambda v: v in ("static", "hash")),
                table.integer("dim", 1),
                table.get("dtype", str, "", lambda v: v in _ROW_FILE_DTYPES),
            )
        )
        fields.problems += table.problems
    files = {}
    for name, f in fields.named_objects("files").items():
        info = _Fields(f, f"files[{name}].")
        files[name] = FileInfo(
            info.integer("bytes"),
            info.integer("count"),
            info.get("sha256", str, ""),
            info.get("dtype", str, "", lambda v: v in (*KEY_FILE_DTYPES, "<f4", "<f8")),
            info.get("base", int, 0, lambda v: True),
        )
        fields.problems += info.problems
    header = DeltaHeader(
        model_id=fields.get("model_id", str, ""),
        sequence=fields.integer("sequence", 1),
        snapshot=fields.get("snapshot", bool, False, lambda v: True),
        base_step=fields.integer("base_step", -1),
        step=fields.integer("step", -1),
        created=fields.get("created", float, 0.0),
        world_size=fields.integer("world_size", 1),
        tables=tables,
        files=files,
    )
    if fields.problems:
        raise DeltaError(f"{where}: damaged header ({', '.join(fields.problems)})")
    return header


def read_header(path: pathlib.Path) -> DeltaHeader:
    """The checked header.json of delta directory `path`.

    Raises:
      DeltaError: missing, unreadable, altered (its checksum), of another format, or with a
        field of the wrong type.
    """
    header_path = path / HEADER
    try:
        raw: object = json.loads(header_path.read_text())
    except FileNotFoundError as e:
        raise DeltaError(f"{path}: no {HEADER}: not a complete delta") from e
    except (OSError, ValueError) as e:
        raise DeltaError(f"{header_path}: unreadable ({e})") from e
    if not isinstance(raw, dict):
        raise DeltaError(f"{header_path}: not a delta header (a JSON object is expected)")
    if raw.get("checksum") != header_checksum(raw):
        raise DeltaError(f"{header_path}: checksum mismatch (damaged or altered header)")
    if raw.get("format") != FORMAT or raw.get("version") != VERSION:
        raise DeltaError(
            f"{header_path}: format {raw.get('format')!r} version {raw.get('version')!r}, "
            f"expected {FORMAT!r} {VERSION}"
        )
    return parse_header(raw, header_path)


@dataclasses.dataclass
class TableDelta:
    """One table's part of a delta, over every rank: keys [n] with their rows [n, dim], and
    the deleted keys [m]."""

    keys: npt.NDArray[np.int64]
    rows: npt.NDArray[np.floating]
    deleted: npt.NDArray[np.int64]


@dataclasses.dataclass
class Delta:
    """A delta read from disk and checked: its header and its tables."""

    path: pathlib.Path
    header: DeltaHeader
    tables: list[TableDelta]


def _read_array(
    path: pathlib.Path, info: FileInfo, dtypes: tuple[str, ...], width: int
) -> npt.NDArray[np.generic]:
    """A file's values (flat), after checking its element type (one of `dtypes`), size and
    checksum against the header."""
    if info.dtype not in dtypes:
        raise DeltaError(f"{path}: elements of type {info.dtype}, expected one of {dtypes}")
    if not path.is_file():
        raise DeltaError(f"{path}: missing file")
    dtype = np.dtype(info.dtype)
    size = path.stat().st_size
    if size != info.size or size != info.count * width * dtype.itemsize:
        raise DeltaError(
            f"{path}: {size} bytes, the header says {info.size} for {info.count} "
            f"entries (truncated or overwritten)"
        )
    data = path.read_bytes()  # once: hashed, then used
    if hashlib.sha256(data).hexdigest() != info.sha256:
        raise DeltaError(f"{path}: checksum mismatch (corrupt file)")
    return np.frombuffer(data, dtype)


def read_delta(path: str | os.PathLike[str]) -> Delta:
    """Reads and checks delta directory `path`: its header, then every file's presence, size
    and SHA-256, and that the files hold whole rows of each table's width.

    Raises:
      DeltaError: naming the file and the problem.
    """
    path = pathlib.Path(path)
    header = read_header(path)
    own_name = delta_name(header.sequence, header.snapshot)
    if _NAME.fullmatch(path.name) and path.name != own_name:
        raise DeltaError(f"{path}: its header is that of {own_name}")
    files = header.files
    tables = []
    for t, meta in enumerate(header.tables):
        keys, rows, deleted = [], [], []
        dtype = row_file_dtype(meta.dtype)
        for rank in range(header.world_size):
            names = table_files(t, rank)
            missing = [n for n in names if n not in files]
            if missing:
                raise DeltaError(f"{path / HEADER}: no entry for {missing[0]}")
            if files[names[0]].count != files[names[1]].count:
                raise DeltaError(f"{path / HEADER}: {names[0]} and {names[1]} differ in count")
            k = _read_array(path / names[0], files[names[0]], KEY_FILE_DTYPES, 1)
            keys.append(k.astype(np.int64) + files[names[0]].base)
            r = _read_array(path / names[1], files[names[1]], (dtype.str,), meta.dim)
            rows.append(r.reshape(-1, meta.dim))
            deleted.append(_read_array(path / names[2], files[names[2]], ("<i8",), 1))
        k, r, d = (np.concatenate(x) for x in (keys, rows, deleted))
        tables.append(TableDelta(k.astype(np.int64), r.astype(dtype), d.astype(np.int64)))
    return Delta(path, header, tables)


@dataclasses.dataclass(frozen=True)
class ModelState:
    """What an updatable model reports through its state signature."""

    model_id: str
    sequence: int
    step: int
    tables: list[TableInfo]

    @classmethod
    def of(cls, model: object) -> ModelState:
        """The state of a loaded updatable SavedModel (tf.saved_model.load's object)."""
        signatures: Mapping[str, Signature] = getattr(model, "signatures", {})
        if STATE_SIGNATURE not in signatures or APPLY_SIGNATURE not in signatures:
            raise DeltaError(
                "the model has no delta signatures: export it with "
                "export_saved_model(..., updatable=True)"
            )
        out = {k: v.numpy() for k, v in signatures[STATE_SIGNATURE]().items()}
        fields = (out[f"table_{f}"] for f in ("names", "kinds", "dims", "dtypes"))
        tables = [
            TableInfo(n.decode(), k.decode(), int(d), t.decode()) for n, k, d, t in zip(*fields)
        ]
        return cls(out["model_id"].decode(), int(out["sequence"]), int(out["step"]), tables)


def check_fits(delta: Delta, state: ModelState) -> None:
    """Refuses a delta the model cannot take: another model's, other tables, or a gap.

    Raises:
      DeltaError: naming the delta and the problem.
    """
    header = delta.header
    if header.model_id != state.model_id:
        raise DeltaError(
            f"{delta.path}: a delta of model '{header.model_id}', the model is '{state.model_id}'"
        )
    if header.tables != state.tables:
        raise DeltaError(f"{delta.path}: tables {header.tables}, the model has {state.tables}")
    if not header.snapshot and header.sequence > state.sequence + 1:
        raise DeltaError(
            f"{delta.path}: sequence gap: the model is at delta {state.sequence}, this is "
            f"delta {header.sequence}; a snapshot after the missing ones lets it catch up"
        )


def apply_delta(model: object, delta: Delta | str | os.PathLike[str]) -> bool:
    """Applies a delta (or the delta directory at a path) to a loaded updatable model.

    Returns:
      True if the model changed; False for a delta the model already has.

    Raises:
      DeltaError: a damaged delta, another model's, other tables, or a gap; the model is
        unchanged.
    """
    if not isinstance(delta, Delta):
        delta = read_delta(delta)
    state, header = ModelState.of(model), delta.header
    check_fits(delta, state)
    if header.sequence <= state.sequence:
        return False
    return _call_apply(model, delta)


def warm_up(model: object) -> None:
    """Applies an empty delta at the model's own sequence (it changes nothing), so that the
    first real delta does not pay TensorFlow's one-time preparation of the apply signature
    (~0.1 s). DeltaUpdater calls it."""
    s = ModelState.of(model)
    header = DeltaHeader(s.model_id, s.sequence, False, s.step, s.step, 0.0, 1, s.tables, {})
    i64 = np.zeros([0], np.int64)
    empty = [TableDelta(i64, np.zeros([0, t.dim], row_file_dtype(t.dtype)), i64) for t in s.tables]
    _call_apply(model, Delta(pathlib.Path(), header, empty))


def _call_apply(model: object, delta: Delta) -> bool:
    inputs = {k: tf.constant(getattr(delta.header, k)) for k in ("model_id", "snapshot")}
    inputs |= {k: tf.constant(getattr(delta.header, k), tf.int64) for k in ("sequence", "step")}
    for t, part in enumerate(delta.tables):  # rows: float64 or float32, as the files hold
        parts = {"keys": part.keys, "rows": part.rows, "deleted": part.deleted}
        inputs.update({f"t{t}_{k}": tf.constant(v) for k, v in parts.items()})
    out = getattr(model, "signatures", {})[APPLY_SIGNATURE](**inputs)
    return bool(out["applied"].numpy())


def list_deltas(directory: str | os.PathLike[str]) -> list[tuple[int, bool, pathlib.Path]]:
    """(sequence, is a snapshot, path) of the complete deltas in `directory` (none while it
    does not exist), in order."""
    found = []
    directory = pathlib.Path(directory)
    for entry in directory.iterdir() if directory.is_dir() else ():
        match = _NAME.fullmatch(entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(2)), match.group(1) == "snapshot", entry))
    return sorted(found, key=lambda d: (d[0], not d[1]))


class DeltaUpdater:
    """Keeps a loaded updatable model up to date with a delta directory.

    `poll()` applies, in order, every delta after the model's; at a gap (a missing or refused
    delta) it takes the newest snapshot after the model's delta, if there is one, and goes
    on from there; otherwise it stops at the gap and reports it in `status()` until a snapshot
    appears. `start()` polls in a thread.

    Args:
      model: the object tf.saved_model.load returns for an updatable export.
      directory: the delta directory the training side writes to.
      clock: the time source of the lag (seconds; time.time by default).
    """

    def __init__(self, model: object, directory: str | os.PathLike[str], clock: Clock = time.time):
        self._model = model
        self._directory = pathlib.Path(directory)
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: str | None = None
        self._applied_created: float | None = None
        warm_up(model)  # also refuses a model without the delta signatures

    def poll(self) -> list[int]:
        """Applies the deltas the model does not have yet; returns their sequence numbers."""
        with self._lock:
            applied: list[int] = []
            self._error = None
            while True:
                sequence = ModelState.of(self._model).sequence
                later = [d for d in list_deltas(self._directory) if d[0] > sequence]
                if not later:
                    return applied
                nxt = [d for d in later if d[0] == sequence + 1]
                try:
                    if not nxt:
                        raise DeltaError(
                            f"{self._directory}: sequence gap: the model is at delta "
                            f"{sequence}, the next one here is {later[0][0]}"
                        )
                    self._apply(nxt[0][2])
                except DeltaError as e:
                    failed = nxt[0][2] if nxt else None
                    snapshots = [d for d in later if d[1] and d[2] != failed]
                    if not snapshots:
                        self._error = str(e)
                        return applied
                    try:
                        self._apply(snapshots[-1][2])
                    except DeltaError as e2:
                        self._error = f"{e}; the snapshot fallback failed too: {e2}"
                        return applied
                applied.append(ModelState.of(self._model).sequence)

    def _apply(self, path: pathlib.Path) -> None:
        delta = read_delta(path)
        apply_delta(self._model, delta)
        self._applied_created = delta.header.created

    def status(self) -> dict[str, object]:
        """A dict: model_id, sequence and step (the model's), newest (the newest complete
        delta in the directory, or None), lag_deltas (newest - sequence, 0 when up to date),
        lag_seconds (age of the oldest delta not applied yet, 0 when up to date),
        applied_age_seconds (since the delta the model is at was written; None before the
        first), error (why the last poll stopped short, or None)."""
        state = ModelState.of(self._model)
        found = list_deltas(self._directory)
        newest = found[-1][0] if found else None
        pending = [d for d in found if d[0] > state.sequence]
        now = self._clock()
        lag_seconds = 0.0
        if pending:
            try:
                lag_seconds = max(0.0, now - read_header(pending[0][2]).created)
            except DeltaError:
                lag_seconds = max(0.0, now - pending[0][2].stat().st_mtime)
        age = None if self._applied_created is None else now - self._applied_created
        return {
            "model_id": state.model_id,
            "sequence": state.sequence,
            "step": state.step,
            "newest": newest,
            "lag_deltas": 0 if newest is None else max(0, newest - state.sequence),
            "lag_seconds": lag_seconds,
            "applied_age_seconds": age,
            "error": self._error,
        }

    def start(self, poll_seconds: float = 5.0) -> None:
        """Polls every `poll_seconds` in a daemon thread until stop()."""
        if self._thread is not None:
            raise RuntimeError("the updater is already running")
        self._stop.clear()

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.poll()
                except (OSError, tf.errors.OpError) as e:  # reported, retried next time
                    self._error = f"{type(e).__name__}: {e}"
                self._stop.wait(poll_seconds)

        self._thread = threading.Thread(target=loop, name="delta-updater", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops the polling thread (after the poll in progress)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
