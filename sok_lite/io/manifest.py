"""The manifest of a sok_lite checkpoint (docs/checkpoint_format.md): its format, the error a
load raises, and the checks a load makes of the manifest and the files it lists before it
reads any row."""

from __future__ import annotations

import hashlib
import json
import pathlib
from typing import Any, TypeAlias

import numpy as np

FORMAT = "sok_lite.checkpoint"
VERSION = 1
# Table dtypes a load converts between; rows files hold float64 for float64 tables, else float32
# (a 16-bit table's values widened exactly, beside its slots: float32, or bfloat16 widened
# exactly; a load rounds them to nearest into bfloat16 slots).
CONVERTIBLE_DTYPES = ("float32", "float64", "bfloat16", "float16")

# A manifest.json as parsed: its fields are checked (_check_manifest_types) before use.
Manifest: TypeAlias = dict[str, Any]  # type escape: parsed JSON


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded: missing, incomplete, corrupt or not matching."""

    __module__ = "sok_lite"  # named as users catch it: sok_lite.CheckpointError


def sha256(path: pathlib.Path) -> str:
    """The hex SHA-256 of a file's bytes (checkpoints and deltas record theirs)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(final: pathlib.Path) -> Manifest:
    manifest_path = final / "manifest.json"
    if not manifest_path.exists():
        raise CheckpointError(f"{final}: no manifest.json: not a complete sok_lite checkpoint")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{manifest_path}: unreadable manifest ({e})") from e
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{manifest_path}: not a manifest (a JSON object is expected)")
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise CheckpointError(
            f"{manifest_path}: format {manifest.get('format')!r} version "
            f"{manifest.get('version')!r}, expected {FORMAT!r} {VERSION}"
        )
    _check_manifest_types(manifest, manifest_path)
    return manifest


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_manifest_types(manifest: Manifest, manifest_path: pathlib.Path) -> None:
    """Every field a load reads has the type dump writes: a damaged manifest is a
    CheckpointError naming the field, never an error of whatever reads it later."""
    problems = []
    if not _is_int(manifest.get("world_size")) or manifest["world_size"] < 1:
        problems.append("world_size")
    for key in ("iterations", "since_step"):
        if manifest.get(key) is not None and not _is_int(manifest[key]):
            problems.append(key)
    tables = manifest.get("tables")
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        problems.append("tables")
    else:
        for i, t in enumerate(tables):
            if not _is_int(t.get("dim")) or t["dim"] < 1 or not isinstance(t.get("slots"), list):
                problems.append(f"tables[{i}]")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(f, dict)
        and _is_int(f.get("bytes"))
        and _is_int(f.get("rows"))
        and (f.get("width") is None or _is_int(f["width"]))
        for f in files.values()
    ):
        problems.append("files")
    if problems:
        raise CheckpointError(f"{manifest_path}: damaged manifest ({', '.join(problems)})")


def check_files(final: pathlib.Path, manifest: Manifest) -> None:
    for name, info in manifest["files"].items():
        f = final / name
        if not f.exists():
            raise CheckpointError(f"{f}: missing shard file")
        if f.stat().st_size != info["bytes"]:
            raise CheckpointError(
                f"{f}: {f.stat().st_size} bytes, the manifest says "
                f"{info['bytes']} (truncated or overwritten)"
            )
        if sha256(f) != info["sha256"]:
            raise CheckpointError(f"{f}: checksum mismatch (corrupt file)")


def file_dtype(table_dtype: str) -> np.dtype[np.floating]:
    """The element type of a table's rows files (see CONVERTIBLE_DTYPES)."""
    return np.dtype("<f8" if table_dtype == "float64" else "<f4")


def check_shards(final: pathlib.Path, manifest: Manifest, t: int, width_out: int) -> None:
    """Table t's shard files hold whole rows of at least width_out values, as many as the
    manifest says: every later read of them is in bounds."""
    itemsize = file_dtype(manifest["tables"][t]["dtype"]).itemsize
    for r in range(manifest["world_size"]):
        name = f"t{t}.r{r}"
        ids, rows = manifest["files"].get(f"{name}.ids"), manifest["files"].get(f"{name}.rows")
        if ids is None or rows is None:
            raise CheckpointError(f"{final / 'manifest.json'}: no files {name}.ids/.rows listed")
        count, width = rows["rows"], rows["width"]
        if count and (width is None or width < width_out):
            raise CheckpointError(
                f"{final / f'{name}.rows'}: rows of width {width}, need {width_out}"
            )
        if ids["bytes"] != 8 * count or rows["bytes"] != itemsize * count * (width or 0):
            raise CheckpointError(
                f"{final / name}.*: {ids['bytes']} + {rows['bytes']} bytes do not hold the "
                f"{count} rows of width {width} the manifest says"
            )
