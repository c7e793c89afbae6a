"""Fuzz programs for the dynamic (hash) table ops: one table, then a few calls on it."""

import numpy as np
from hypothesis import strategies as st

from tests.ops.fuzz.op_fuzz_cases import (
    INT64_MAX,
    INT64_MIN,
    NUM_PARAMS,
    OPTIMIZER_KINDS,
    Case,
    expect,
    float_array,
    floats,
    hyper_vector,
    int_array,
    ints,
    mutate_row_splits,
    num_slots_for,
    rare,
    row_splits_problem,
    scalar,
    sizes,
    valid_row_splits,
)

STEPS_VALUES = st.sampled_from([3, 0, -1, INT64_MIN, INT64_MAX])
KEYS = st.one_of(st.integers(-3, 6), st.sampled_from([INT64_MIN, INT64_MAX, -1, 2**31, 2**40]))


def table_spec(draw) -> dict:
    """A SokLiteDynamicTable resource spec with mostly sane, sometimes odd, attrs."""
    dim = draw(st.integers(1, 3))
    if rare(draw, 12):
        dim = draw(st.sampled_from([2**40, INT64_MAX]))
    kind = draw(
        st.sampled_from(["constant", "random_normal", "truncated_normal", "random_uniform"])
    )
    if rare(draw, 16):
        kind = "bogus"
    return {
        "resource": "table",
        "name": "t",
        "dim": dim,
        "init_kind": kind,
        "seed": draw(ints()),
        "init_a": draw(floats()),
        "init_b": draw(floats()),
        "capacity": draw(st.sampled_from([0, 4, 1, -1, 2**62])),
        "policy": draw(st.sampled_from(["lru", "lfu"])),
        "min_count": draw(st.sampled_from([1, 2, 0, -3, 2**62])),
        # 16-bit values: every op's record conversions (packed halves, odd dims) fuzzed too.
        "storage_dtype": draw(st.sampled_from(["float32", "bfloat16", "float16"])),
        "rounding_seed": draw(ints()),
    }


MAX_WIDTH = 16  # wider rows (a huge dim) are drawn 4 wide: they cannot fit the table


def _rows(draw, n: int, width: int) -> np.ndarray | dict:
    """[n, width] float32 values; zeros (possible at any width) when n is 0."""
    if n == 0:
        return {"zeros": [0, min(width, INT64_MAX)], "dtype": "float32"}
    return float_array(draw, [n, width if width <= MAX_WIDTH else 4])


def _lookup(draw, table, dim):
    keys = int_array(draw, KEYS, max_rank=2)
    attr_dim = dim if not rare(draw) else draw(st.sampled_from([dim % 3 + 1, 1]))

    def check(out):
        expected = (keys.size, attr_dim)
        expect(out[0]["shape"] == expected, f"values {out[0]['shape']}, expected {expected}")

    kwargs = {"table": table, "keys": keys, "dim": attr_dim, "table_name": "t"}
    return Case("sok_lite_dynamic_lookup", kwargs, draw(st.booleans()), "", check)


def _lookup_combine(draw, table, dim):
    ids = int_array(draw, KEYS, max_rank=2 if rare(draw) else 1)
    splits = mutate_row_splits(draw, valid_row_splits(draw, ids.size))
    weights = np.zeros([0], np.float32)
    if draw(st.booleans()):
        weights = float_array(draw, [ids.size + (1 if rare(draw) else 0)])
    hotness = draw(st.sampled_from([0, 1, 2]))
    attr_dim = dim if not rare(draw) else draw(st.sampled_from([dim % 3 + 1, 1]))
    invalid = ""
    if ids.ndim != 1 or splits.ndim != 1:
        invalid = "ids or row_splits not 1-D"
    elif row_splits_problem(splits, ids.size):
        invalid = row_splits_problem(splits, ids.size)
    elif hotness > 0 and np.diff(splits).max(initial=0) > hotness:
        invalid = "a sample longer than hotness"
    elif weights.size not in (0, ids.size):
        invalid = "weights do not match the ids"

    def check(out):
        expected = (splits.size - 1, attr_dim)
        expect(out[0]["shape"] == expected, f"combined {out[0]['shape']}, expected {expected}")

    kwargs = {"table": table, "ids": ids, "row_splits": splits, "weights": weights}
    kwargs |= {"dim": attr_dim, "hotness": hotness, "table_name": "t"}
    kwargs["combiner"] = draw(st.sampled_from(["sum", "mean", "sqrtn"]))
    return Case("sok_lite_dynamic_lookup_combine", kwargs, draw(st.booleans()), invalid, check)


def _apply(draw, table, dim):
    keys = int_array(draw, KEYS)
    kind = draw(st.sampled_from([*OPTIMIZER_KINDS, "bogus"]))
    hyper = hyper_vector(draw, kind)
    slots = num_slots_for(kind, hyper) + (1 if rare(draw) else 0)
    rows = keys.size + (1 if rare(draw) else 0)
    grads = _rows(draw, rows, dim)
    invalid = ""
    short = kind in NUM_PARAMS and hyper.size < 2 + NUM_PARAMS[kind]
    if kind == "bogus" or short or slots != num_slots_for(kind, hyper):
        invalid = "an unknown kind, short hyper vector or wrong slot count"
    elif rows != keys.size or (rows and dim > MAX_WIDTH):
        invalid = "gradients that do not fit the keys"
    kwargs = {"table": table, "keys": keys, "grads": grads, "hyper": hyper}
    kwargs["step"] = scalar(draw, STEPS_VALUES)
    kwargs |= {"kind": kind, "slot_init": [draw(floats()) for _ in range(slots)]}
    return Case("sok_lite_dynamic_apply", kwargs, draw(st.booleans()), invalid)


def _export(draw, table, dim):
    with_slots = draw(st.booleans())

    def check(out):
        keys, values = out
        expect(len(keys["shape"]) == 1, f"keys {keys['shape']}")
        expect(values["shape"][0] == keys["shape"][0], "one row per key")
        width = values["shape"][1]
        expect(width == dim if not with_slots else width % dim == 0, f"row width {width}")

    kwargs = {"table": table, "since_step": scalar(draw, STEPS_VALUES), "with_slots": with_slots}
    return Case("sok_lite_dynamic_export", kwargs, draw(st.booleans()), "", check)


def _export_range(draw, table, dim):
    with_slots = draw(st.booleans())
    cursor = scalar(draw, st.sampled_from([0, 1, 5, -1, INT64_MAX, INT64_MIN]))
    limit = scalar(draw, sizes())
    invalid = ""
    if (cursor.ndim == 0 and cursor < 0) or (limit.ndim == 0 and limit < 1):
        invalid = "a negative cursor or a limit < 1"

    def check(out):
        keys, values, cursor_out = out
        expect(len(keys["shape"]) == 1, f"keys {keys['shape']}")
        expect(values["shape"][0] == keys["shape"][0] <= limit, "one row per key, <= limit")
        width = values["shape"][1]
        expect(width == dim if not with_slots else width % dim == 0, f"row width {width}")
        expect(cursor_out["shape"] == () and cursor_out["value"] >= -1, f"next {cursor_out}")

    kwargs = {"table": table, "since_step": scalar(draw, STEPS_VALUES), "cursor": cursor}
    kwargs |= {"limit": limit, "with_slots": with_slots}
    return Case("sok_lite_dynamic_export_range", kwargs, draw(st.booleans()), invalid, check)


def _memory_stats(draw, table, dim):
    def check(out):
        expect(out[0]["shape"] == (9,), f"stats {out[0]['shape']}")

    return Case("sok_lite_dynamic_memory_stats", {"table": table}, draw(st.booleans()), "", check)


def _assign(draw, table, dim):
    keys = int_array(draw, KEYS)
    with_slots = draw(st.booleans())
    width = dim * (draw(st.integers(1, 4)) if with_slots else 1)
    rows = keys.size + (1 if rare(draw) else 0)
    # With slots, rows wider than the table's (by whole slots) add slots (a restore).
    invalid = ""
    if rows != keys.size or (rows and width > MAX_WIDTH):
        invalid = "values that do not fit the keys"
    kwargs = {"table": table, "keys": keys, "values": _rows(draw, rows, width)}
    kwargs |= {"step": scalar(draw, STEPS_VALUES), "with_slots": with_slots}
    return Case("sok_lite_dynamic_assign", kwargs, draw(st.booleans()), invalid)


def _size(draw, table, dim):
    def check(out):
        expect(out[0]["shape"] == () and out[0]["value"] >= 0, f"size {out[0]}")

    return Case("sok_lite_dynamic_size", {"table": table}, draw(st.booleans()), "", check)


def _evict(draw, table, dim):
    steps = scalar(draw, sizes())
    invalid = "steps_unseen < 1" if steps.ndim == 0 and steps < 1 else ""

    def check(out):
        expect(out[0]["shape"] == () and out[0]["value"] >= 0, f"evicted {out[0]}")

    kwargs = {"table": table, "steps_unseen": steps}
    return Case("sok_lite_dynamic_evict", kwargs, draw(st.booleans()), invalid, check)


def _clear(draw, table, dim):
    return Case("sok_lite_dynamic_clear", {"table": table}, draw(st.booleans()))


STEPS = [_lookup, _lookup_combine, _apply, _export, _assign, _size, _evict, _clear]
STEPS += [_export_range, _memory_stats]


@st.composite
def dynamic_program(draw) -> list[Case]:
    """A table spec, then 1 to 6 calls on it (rarely on a variable handle instead)."""
    table = table_spec(draw)
    program = []
    for step in draw(st.lists(st.sampled_from(STEPS), min_size=1, max_size=6)):
        handle = table
        if rare(draw, 16):
            handle = {"resource": "variable", "shape": [2, 2], "dtype": "float32", "fill": 0.0}
        case = step(draw, handle, table["dim"])
        if handle is not table or table["init_kind"] == "bogus":
            case.invalid = case.invalid or "not a usable hash table"
        program.append(case)
    return program
