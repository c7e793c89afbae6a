"""Fuzz programs for the dynamic (hash) table ops: one table, then a few calls on it; and the
same programs on a table with a disk tier, held to the all-RAM table's results."""

import dataclasses

import numpy as np
from hypothesis import strategies as st

from sok_lite.memory import tier_index_bytes, tier_record_bytes
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
from tests.ops.fuzz.op_fuzz_worker import FRESH_DIR

STEPS_VALUES = st.sampled_from([3, 0, -1, INT64_MIN, INT64_MAX])
DIMS = st.integers(1, 3)
KEYS = st.one_of(st.integers(-3, 6), st.sampled_from([INT64_MIN, INT64_MAX, -1, 2**31, 2**40]))


def table_spec(draw, dims=DIMS) -> dict:
    """A SokLiteDynamicTable resource spec with mostly sane, sometimes odd, attrs."""
    dim = draw(dims)
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


def _swap_rows(draw, table, dim):
    """Swaps the table's rows with a second table's: configured alike (with its own disk tier,
    if any), rarely of another dimension, or the table itself."""
    staged = table | {"name": "staged"}
    invalid = ""
    if rare(draw):
        staged, invalid = table, "a table swapped with itself"
    elif rare(draw) and "dim" in table:
        staged["dim"] = dim % 3 + 1 if dim % 3 + 1 != dim else dim + 1
        staged["name"] = "staged_other_dim"  # a resource name is created once per program
        invalid = "a staged table of another dimension"
    kwargs = {"table": table, "staged": staged}
    return Case("sok_lite_dynamic_swap_rows", kwargs, draw(st.booleans()), invalid)


def _prefetch(draw, table, dim):
    """Reads a batch's rows on disk back ahead of their lookup (nothing without a tier); rarely
    waits for a lookup (up to 1 s), rarely for a rank or owner the job does not have."""
    keys = int_array(draw, KEYS, max_rank=2 if rare(draw) else 1)
    num_ranks = draw(st.sampled_from([1, 2]))
    rank = draw(st.sampled_from([0, 1, 2])) if rare(draw) else 0
    owner = draw(st.sampled_from([-3, 0, 1, 2])) if rare(draw) else -2
    invalid = ""
    if keys.ndim != 1:
        invalid = "keys not 1-D"
    elif rank >= num_ranks or owner < -2 or owner >= num_ranks:
        invalid = "a rank or owner outside the job"

    def check(out):
        read = out[0]
        expect(read["shape"] == () and 0 <= read["value"] <= keys.size, f"read {read}")

    kwargs = {"table": table, "keys": keys, "owner": owner, "rank": rank}
    kwargs |= {"num_ranks": num_ranks, "wait_for_lookup": rare(draw, 16), "table_name": "t"}
    return Case("sok_lite_dynamic_prefetch", kwargs, draw(st.booleans()), invalid, check)


STEPS = [_lookup, _lookup_combine, _apply, _export, _assign, _size, _evict, _clear]
STEPS += [_export_range, _memory_stats, _swap_rows, _prefetch]


@st.composite
def dynamic_program(draw) -> list[Case]:
    """A table spec, then 1 to 6 calls on it (rarely on a variable handle instead)."""
    return _table_program(draw, DIMS)[1]


def _table_program(draw, dims, steps=STEPS, calls=(1, 6)) -> tuple[dict, list[Case]]:
    """(table spec, program) of dynamic_program."""
    table = table_spec(draw, dims)
    program = []
    for step in draw(st.lists(st.sampled_from(steps), min_size=calls[0], max_size=calls[1])):
        handle = table
        if rare(draw, 16):
            handle = {"resource": "variable", "shape": [2, 2], "dtype": "float32", "fill": 0.0}
        case = step(draw, handle, table["dim"])
        if handle is not table or table["init_kind"] == "bogus":
            case.invalid = case.invalid or "not a usable hash table"
        program.append(case)
    return table, program


# ----------------------------------------------------------------------------- disk tier

# About what the disk tier charges to ram_budget (kernels/core/hash_table_tier.cc): per row in
# RAM its record and ~83 bytes of bookkeeping and hash slot, and the disk index as
# sok_lite.memory.tier_index_bytes. Nothing depends on the exact figures: a budget off by a
# little spills a little sooner or later, and a call it cannot hold is refused, which the
# comparison expects.
RAM_ROW_BYTES = 83


# Wider rows too: a row of a few floats costs about what its disk index does, so a budget that
# holds a batch would rarely spill them.
TIERED_DIMS = st.sampled_from([1, 2, 3, 8, 16])
# More calls, and more of those that store rows: programs that outgrow the budget.
TIERED_STEPS = STEPS + [_lookup, _lookup, _lookup_combine, _lookup_combine, _assign, _apply]


def tier_budget(dim: int, storage_dtype: str, slots: int, ram_rows: int, disk_rows: int) -> int:
    """ram_budget for ram_rows rows in RAM (values and `slots` slots) beside disk_rows on disk."""
    value_words = dim if storage_dtype == "float32" else (dim + 1) // 2
    record = 4 * (value_words + dim * slots)
    index = tier_index_bytes(ram_rows + disk_rows, tier_record_bytes(record))
    return min(ram_rows * (record + RAM_ROW_BYTES) + index, 2**62)


def _program_keys(program: list[Case]) -> tuple[int, int]:
    """(distinct keys that calls not known to be malformed may store, the most one call
    needs in RAM at once). Optimizer steps need their rows but store none; an assign stores
    one row at a time."""
    stored, batch = set(), 1
    for c in program:
        keys = c.kwargs.get("keys", c.kwargs.get("ids"))
        if keys is None or c.invalid:
            continue
        keys = set(np.ravel(keys).tolist())
        if c.op != "sok_lite_dynamic_apply":
            stored |= keys
        if c.op != "sok_lite_dynamic_assign":
            batch = max(batch, len(keys))
    return len(stored), batch


def _program_slots(program: list[Case], dim: int) -> int:
    """The most slots the program's calls may lay out in the table."""
    slots = [len(c.kwargs["slot_init"]) for c in program if "slot_init" in c.kwargs]
    for c in program:
        values = c.kwargs.get("values")
        if c.op == "sok_lite_dynamic_assign" and c.kwargs["with_slots"] and dim:
            width = values.shape[1] if isinstance(values, np.ndarray) else values["zeros"][1]
            slots.append(width // dim - 1)
    return max([0, *slots])


@dataclasses.dataclass
class TieredProgram:
    """A program on a table with a disk tier and, when their results must agree, the same
    program on an all-RAM table (its oracle)."""

    tiered: list[Case]
    oracle: list[Case] | None


def _on_table(program: list[Case], old: dict, new: dict) -> list[Case]:
    """The program on table `new` instead of `old`; a second table configured as `old` (a
    swap's staged table) becomes one configured as `new`."""

    def unnamed(spec: dict) -> dict:
        return {k: v for k, v in spec.items() if k != "name"}

    def moved(value):
        if value is old:
            return new
        if isinstance(value, dict) and value.get("resource") == "table":
            if unnamed(value) == unnamed(old):
                return new | {"name": value["name"]}
        return value

    return [
        dataclasses.replace(c, kwargs={k: moved(v) for k, v in c.kwargs.items()}) for c in program
    ]


@st.composite
def tiered_program(draw) -> TieredProgram:
    """A dynamic program on a table whose disk tier holds a few rows' worth in RAM, so that rows
    spill and come back; the oracle runs it on the same table without the tier.

    The budget holds between one row and a few more than the program's largest call needs, plus
    the disk index of some of its keys: a call that needs more rows in RAM than the budget allows
    may fail with "raise ram_budget", after which the two tables differ.
    """
    table, program = _table_program(draw, TIERED_DIMS, TIERED_STEPS, calls=(3, 8))
    stored, batch = _program_keys(program)
    dim = min(table["dim"], MAX_WIDTH)
    slots = _program_slots(program, dim)
    # RAM for the largest call (rarely less) and fewer than all rows; an index for some of the
    # rest (rows of a few floats take about as much RAM as their index on disk).
    ram_rows = draw(st.integers(batch, max(batch, stored - 1)))
    if rare(draw):
        ram_rows = draw(st.integers(1, batch))
    disk_rows = draw(st.integers(0, max(0, stored - ram_rows)))
    budget = tier_budget(dim, table["storage_dtype"], slots, ram_rows, disk_rows)
    ram = table | {"capacity": 0}
    if table["min_count"] < 1 and not rare(draw):
        ram["min_count"] = 1  # more tables that take rows
    tiered = ram | {"tier_path": FRESH_DIR, "ram_budget": budget}
    oracle = _on_table(program, table, ram)
    # A capacity (which drops rows; < 1: none) or a budget < 1 byte: the disk tier must refuse
    # the table.
    if rare(draw, 16):
        tiered["capacity"] = draw(st.sampled_from([4, 1, 2**62]))
    elif rare(draw, 16):
        tiered["ram_budget"] = draw(st.sampled_from([0, -1, INT64_MIN]))
    program = _on_table(program, table, tiered)
    # Both end by exporting every row with its slots: the tables must agree row for row.
    final = {"table": None, "since_step": np.array(INT64_MIN, np.int64), "with_slots": True}
    program.append(Case("sok_lite_dynamic_export", final | {"table": tiered}))
    program.append(Case("sok_lite_dynamic_memory_stats", {"table": tiered}))
    oracle.append(Case("sok_lite_dynamic_export", final | {"table": ram}))
    oracle.append(Case("sok_lite_dynamic_memory_stats", {"table": ram}))
    if tiered["capacity"] > 0 or tiered["ram_budget"] < 1:
        for case in program:
            if case.kwargs["table"] is tiered:
                case.invalid = case.invalid or "a disk tier with a capacity or no budget"
        return TieredProgram(program, None)
    return TieredProgram(program, oracle)
