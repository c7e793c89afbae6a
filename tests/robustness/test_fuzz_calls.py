"""Drives sok_lite's public stateful calls with random, mostly bad arguments: each call either
succeeds or raises ValueError / TypeError / tf.errors.InvalidArgumentError (CheckpointError is a
ValueError), and a call that raises changes nothing (worlds.py's snapshot, bit for bit).

SOK_LITE_FUZZ_EXAMPLES: examples per test (default 20; make fuzz runs 500)."""

import json
import os
import pathlib
import shutil
import tempfile

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sok_lite as sok
from tests.robustness.worlds import DIM, KINDS, assert_unchanged, make_world, snapshot

EXAMPLES = int(os.environ.get("SOK_LITE_FUZZ_EXAMPLES", "20"))
REFUSALS = (ValueError, TypeError, tf.errors.InvalidArgumentError)

fuzz = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    print_blob=False,
)

_worlds: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _world_dirs():
    yield
    for world in _worlds.values():
        shutil.rmtree(world.root, ignore_errors=True)
    _worlds.clear()


def world_of(kind: str):
    """One world per kind for the module: examples run against its current state."""
    if kind not in _worlds:
        _worlds[kind] = make_world(kind, pathlib.Path(tempfile.mkdtemp()))
    return _worlds[kind]


def refused_or_done(world, call, label: str) -> None:
    before = snapshot(world)
    try:
        call()
    except REFUSALS:
        assert_unchanged(before, snapshot(world), label)


ID_VALUES = st.one_of(st.integers(-3, 45), st.sampled_from([-(2**63), 2**31, 2**63 - 1, 2**40]))
ID_ROWS = st.lists(st.lists(ID_VALUES, max_size=4), max_size=4)


@st.composite
def id_inputs(draw):
    rows = draw(ID_ROWS)
    dtype = draw(st.sampled_from([tf.int64, tf.int32, tf.float32, tf.uint8]))
    layout = draw(st.sampled_from(["ragged", "sparse", "dense", "flat"]))
    if dtype in (tf.int32, tf.uint8):
        rows = [[v % 2**31 if dtype == tf.int32 else v % 256 for v in r] for r in rows]
    if layout == "dense":
        width = draw(st.integers(0, 3))
        return tf.constant(np.full([len(rows), width], draw(ID_VALUES) % 2**31), dtype)
    if layout == "flat":
        return tf.constant([v % 2**31 for r in rows for v in r], dtype)
    ragged = tf.ragged.constant(rows, dtype=dtype, ragged_rank=1, inner_shape=())
    return ragged.to_sparse() if layout == "sparse" else ragged


@fuzz
@given(
    kind=st.sampled_from(KINDS),
    ids=id_inputs(),
    combiner=st.sampled_from(["sum", "mean", "sqrtn", "max", "", None]),
    hotness=st.one_of(st.none(), st.integers(-1, 4)),
    weighted=st.booleans(),
)
def test_lookup_sparse_with_random_arguments(kind, ids, combiner, hotness, weighted):
    world = world_of(kind)
    weights = None
    if weighted and isinstance(ids, tf.RaggedTensor):
        weights = tf.ragged.map_flat_values(lambda v: tf.ones_like(v, tf.float32), ids)

    def call():
        sok.lookup_sparse(
            world.table,
            ids,
            sp_weights=weights,
            combiners=None if combiner is None else [combiner],
            hotness=None if hotness is None else [hotness],
        )

    refused_or_done(world, call, f"lookup_sparse({kind}, {ids!r}, {combiner}, {hotness})")


@fuzz
@given(
    kind=st.sampled_from(KINDS),
    rows=st.integers(0, 45),
    width=st.integers(0, 6),
    dtype=st.sampled_from([np.float32, np.float64, np.int64, np.float16]),
    scale=st.sampled_from([1.0, 1e6, np.inf, np.nan]),
)
def test_assign_with_random_arguments(kind, rows, width, dtype, scale):
    world = world_of(kind)
    values = (np.ones([rows, width]) * scale).astype(dtype)
    if world.keyed:
        keys = np.arange(rows, dtype=np.int64)
        call = lambda: world.table.assign(keys, values)  # noqa: E731
    else:
        call = lambda: world.table.assign(values)  # noqa: E731
    refused_or_done(world, call, f"assign({kind}, {values.shape} {values.dtype}, {scale})")


MANIFEST_EDITS = st.tuples(
    st.sampled_from(["format", "version", "world_size", "iterations", "since_step", "tables"]),
    st.one_of(st.none(), st.integers(-2, 3), st.text(max_size=3), st.just([])),
)
TABLE_EDITS = st.tuples(
    st.sampled_from(["name", "dtype", "slots", "kind", "dim", "global_shape"]),
    st.one_of(st.none(), st.integers(-1, DIM + 1), st.sampled_from(["float16", "x", "dynamic"])),
)


@fuzz
@given(
    kind=st.sampled_from(KINDS),
    manifest_edit=st.one_of(st.none(), MANIFEST_EDITS),
    table_edit=st.one_of(st.none(), TABLE_EDITS),
    cut=st.one_of(st.none(), st.integers(0, 64)),
)
def test_load_of_a_randomly_damaged_checkpoint(kind, manifest_edit, table_edit, cut):
    world = world_of(kind)
    damaged = pathlib.Path(tempfile.mkdtemp(dir=world.root.parent)) / "ckpt"
    shutil.copytree(world.checkpoint, damaged)
    manifest = json.loads((damaged / "manifest.json").read_text())
    if manifest_edit is not None:
        manifest[manifest_edit[0]] = manifest_edit[1]
    if table_edit is not None and isinstance(manifest.get("tables"), list) and manifest["tables"]:
        manifest["tables"][0][table_edit[0]] = table_edit[1]
    (damaged / "manifest.json").write_text(json.dumps(manifest))
    if cut is not None:
        rows = damaged / "t0.r0.rows"
        rows.write_bytes(rows.read_bytes()[: max(0, rows.stat().st_size - cut)])

    try:
        refused_or_done(
            world,
            lambda: sok.load(damaged, [world.table], world.optimizer),
            f"load({kind}, {manifest_edit}, {table_edit}, cut {cut})",
        )
    finally:
        shutil.rmtree(damaged.parent)
