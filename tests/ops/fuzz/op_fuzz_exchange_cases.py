"""Fuzz cases for the exchange ops: id messages, vector messages and their layouts."""

import numpy as np
from hypothesis import strategies as st

from tests.ops.fuzz.op_fuzz_cases import (
    INT64_MAX,
    INT64_MIN,
    Case,
    expect,
    float_array,
    int_array,
    ints,
    maybe_wrong_dtype,
    rare,
    variable_spec,
)

BAD_DIMS = [-1, 2**40, INT64_MAX, INT64_MIN]


def parse_id_message(message: np.ndarray, splits: np.ndarray, num_tables: int):
    """Python mirror of ParseIdMessage (kernels/core/exchange.cc), without integer overflow.

    Returns:
      Per (rank, table) segment, (first index, count) into the message; None if malformed.
    """
    m, segments, at = message.ravel().tolist(), [], 0
    for size in splits.ravel().tolist():
        end = at + size
        if size < num_tables or end > len(m):
            return None
        ids_at = at + num_tables
        for t in range(num_tables):
            count = m[at + t]
            if count < 0 or ids_at + count > end:
                return None
            segments.append((ids_at, count))
            ids_at += count
        if ids_at != end:
            return None
        at = end
    return segments if at == len(m) else None


def id_message(draw, num_tables: int, ids=None):
    """(message, splits): a well-formed id message, or rarely a malformed one."""
    message, splits = [], []
    for _ in range(draw(st.integers(0, 3))):
        counts = [draw(st.integers(0, 3)) for _ in range(num_tables)]
        message += counts + draw(
            st.lists(ints() if ids is None else ids, min_size=sum(counts), max_size=sum(counts))
        )
        splits.append(num_tables + sum(counts))
    if num_tables == 3 and rare(draw, 12):
        # Counts whose int64 sum wraps around to the segment's true length.
        k = draw(st.integers(0, 2))
        message = [INT64_MAX, INT64_MAX, k + 2, *draw(st.lists(ints(), min_size=k, max_size=k))]
        splits = [3 + k]
    elif rare(draw, 3):
        how = draw(st.sampled_from(["count", "split", "truncate", "append", "random"]))
        bad = draw(st.sampled_from([-1, 1, INT64_MAX, INT64_MIN, 2**62]))
        if how == "count" and message:
            message[0] = bad if bad != 1 else message[0] + 1
        elif how == "split" and splits:
            splits[draw(st.integers(0, len(splits) - 1))] += bad
            splits = [min(max(s, INT64_MIN), INT64_MAX) for s in splits]
        elif how == "truncate" and message:
            message.pop()
        elif how == "append":
            message.append(0)
        else:
            message = draw(st.lists(ints(), max_size=8))
            splits = draw(st.lists(ints(), max_size=3))
    return np.array(message, np.int64), np.array(splits, np.int64)


def layout(draw, dims: list[int]):
    """(counts, send_pos, num_unique) of a vector message over tables of widths dims."""
    n = len(dims)
    counts = [draw(st.integers(0, 2)) for _ in range(draw(st.integers(0, 3)) * n)]
    num_unique = [sum(counts[t::n]) for t in range(n)]
    pos = [
        draw(st.integers(0, num_unique[s % n] - 1)) for s, c in enumerate(counts) for _ in range(c)
    ]
    if rare(draw, 6) and counts:
        counts[draw(st.integers(0, len(counts) - 1))] = draw(st.sampled_from([-1, 2**62]))
    if rare(draw, 12):
        counts, pos = [2**62] * 4 * n, []  # counts whose int64 sum wraps around to 0
    if rare(draw, 6):
        pos.append(draw(st.sampled_from([0, -1, 2**31 - 1])))
    return np.array(counts, np.int64), np.array(pos, np.int32), num_unique


def layout_problem(counts: np.ndarray, send_pos: np.ndarray, dims: list[int]) -> str:
    """Python mirror of CheckLayout (kernels/tf/exchange_kernels.cc): why it fails, or ""."""
    c, pos, n = counts.ravel().tolist(), send_pos.ravel().tolist(), len(dims)
    if n == 0 or len(c) % n:
        return "counts do not split over the tables"
    if any(x < 0 for x in c) or len(pos) != sum(c):
        return "a negative count or a send_pos of the wrong size"
    num_unique = [sum(c[t::n]) for t in range(n)]
    p = 0
    for s, count in enumerate(c):
        for j in range(p, p + count):
            if not 0 <= pos[j] < num_unique[s % n]:
                return "send_pos out of range"
        p += count
    return ""


def vector_size(counts: np.ndarray, dims: list[int]) -> int:
    c = counts.ravel().tolist()
    return sum(x * dims[s % len(dims)] for s, x in enumerate(c))


def mutate_dims(draw, dims: list[int]) -> list[int]:
    dims = list(dims)
    if rare(draw):
        dims[draw(st.integers(0, len(dims) - 1))] = draw(st.sampled_from(BAD_DIMS))
    if rare(draw, 10):
        dims = dims[:-1] if draw(st.booleans()) else [*dims, 2]
    return dims


@st.composite
def partition_by_owner(draw):
    n_tables = draw(st.integers(1, 3))
    unique = [int_array(draw) for _ in range(n_tables)]
    num_ranks = draw(st.sampled_from([1, 2, 3, 5]))
    if rare(draw):
        num_ranks = draw(st.sampled_from([0, -1, 2**40, 2**62, INT64_MAX]))
    localized = [draw(st.sampled_from([-1, -2, 0, 1])) for _ in range(n_tables)]
    if rare(draw):
        localized[-1] = draw(st.sampled_from([-3, num_ranks, INT64_MIN]))
    if rare(draw, 10):
        localized.append(-1)
    invalid = ""
    if num_ranks < 1 or len(localized) != n_tables:
        invalid = "num_ranks < 1 or a localized_ranks list of the wrong length"
    elif any(r < -2 or r >= num_ranks for r in localized):
        invalid = "a localized rank out of range"
    elif any(r != -2 and (u < 0).any() for r, u in zip(localized, unique)):
        invalid = "a negative id in a table that is not hashed"

    def check(out):
        message, splits, counts, send_pos = out
        total = sum(u.size for u in unique)
        expect(splits["shape"] == (num_ranks,), f"splits {splits['shape']}")
        expect(counts["shape"] == (num_ranks * n_tables,), f"counts {counts['shape']}")
        expect(send_pos["shape"] == (total,), f"send_pos {send_pos['shape']}")
        expect(message["shape"] == (num_ranks * n_tables + total,), "message size")
        if splits["value"] is not None:
            expect(splits["value"].sum() == message["shape"][0], "splits do not cover message")

    kwargs = {"unique_ids": [maybe_wrong_dtype(draw, u) for u in unique]}
    kwargs |= {"num_ranks": num_ranks, "localized_ranks": localized}
    return Case("sok_lite_partition_by_owner", kwargs, draw(st.booleans()), invalid, check)


def _serves(handle: dict, dynamic: bool, dtype: str) -> bool:
    """Whether GatherForPeers can read rows of this dtype from the handle: a hash table's
    float32 rows, or a 2-D variable of the dtype (float32 rows also from a 16-bit variable,
    widened as they are read)."""
    if handle["resource"] == "table":
        return dynamic and dtype == "float32"
    well_formed = handle["resource"] == "variable" and len(handle["shape"]) == 2
    return well_formed and _row_dtype(handle["dtype"]) == dtype and not dynamic


def _row_dtype(dtype: str) -> str:
    return "float32" if dtype in ("float16", "bfloat16") else dtype


@st.composite
def gather_for_peers(draw):
    n_tables = draw(st.integers(1, 2))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    handles, dims, dynamic = [], [], []
    for t in range(n_tables):
        dim = draw(st.integers(1, 3))
        if draw(st.booleans()):
            handles.append(
                {"resource": "table", "name": f"t{t}", "dim": dim, "init_kind": "constant"}
                | {"seed": 1, "init_a": 0.5}
            )
        else:
            handles.append(variable_spec(draw, draw(st.integers(0, 4)), dim, dtype))
        dims.append(dim)
        dynamic.append(handles[-1]["resource"] == "table")
    message, splits = id_message(draw, n_tables, st.integers(-1, 4) | ints())
    dims = mutate_dims(draw, dims)
    if rare(draw, 10):
        dynamic = [not d for d in dynamic]
    segments = parse_id_message(message, splits, n_tables)
    invalid = ""
    if segments is None:
        invalid = "a malformed id message"
    elif len(dims) != n_tables or len(dynamic) != n_tables:
        invalid = "dims or dynamic of the wrong length"
    elif not all(_serves(h, d, dtype) for h, d in zip(handles, dynamic)):
        invalid = "a handle that is not a table of this dtype"
    elif dims != [h.get("dim") or h["shape"][1] for h in handles]:
        invalid = "dims that differ from the tables"
    else:
        for s, (first, count) in enumerate(segments):
            h, ids = handles[s % n_tables], message[first : first + count]
            if _serves(h, False, dtype):
                if ((ids < 0) | (ids >= h["shape"][0])).any():
                    invalid = "a row out of range"

    def check(out):
        vectors, vector_splits = out
        num_ranks = splits.size
        expect(vector_splits["shape"] == (num_ranks,), f"vector_splits {vector_splits['shape']}")
        size = sum(c * dims[s % n_tables] for s, (_, c) in enumerate(segments))
        expect(vectors["shape"] == (size,), f"vectors {vectors['shape']}, expected ({size},)")
        expect(vector_splits["value"].sum() == size, "vector_splits do not cover the vectors")

    kwargs = {"handles": handles, "message": message, "splits": splits, "dtype": dtype}
    kwargs |= {"dims": dims, "dynamic": dynamic, "table_names": ["a", "b"][:n_tables]}
    return Case("sok_lite_gather_for_peers", kwargs, draw(st.booleans()), invalid, check)


@st.composite
def unpack_rows(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    dims = [draw(st.integers(0, 3)) for _ in range(draw(st.integers(1, 3)))]
    counts, send_pos, num_unique = layout(draw, dims)
    n_attr = len(dims)
    dims = mutate_dims(draw, dims)
    if rare(draw, 16):
        dims = []
    invalid = layout_problem(counts, send_pos, dims)
    size = vector_size(counts, dims) if not invalid else 0
    if not invalid and any(d < 0 for d in dims):
        invalid = "a negative dim"
    elif not invalid and len(dims) != n_attr:
        invalid = "dims of the wrong length for N"
    if rare(draw):
        size += 1
        invalid = invalid or "a vector message of the wrong size"
    vectors = float_array(draw, [max(min(size, 64), 0)], dtype)
    if size > 64:
        invalid = invalid or "a vector message of the wrong size"

    def check(out):
        expect(len(out) == n_attr, f"{len(out)} outputs for N={n_attr}")
        for t, rows in enumerate(out):
            expected = (num_unique[t], dims[t])
            expect(rows["shape"] == expected, f"rows {rows['shape']}, expected {expected}")

    kwargs = {"vectors": vectors, "counts": counts, "send_pos": send_pos, "N": n_attr}
    kwargs["dims"] = dims
    return Case("sok_lite_unpack_rows", kwargs, draw(st.booleans()), invalid, check)


@st.composite
def pack_rows(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    dims = [draw(st.integers(0, 3)) for _ in range(draw(st.integers(1, 3)))]
    counts, send_pos, num_unique = layout(draw, dims)
    expected_shapes = [[u, d] for u, d in zip(num_unique, dims)]
    shapes = [[min(max(u, 0), 8), d] for u, d in expected_shapes]  # a count may be huge
    if rare(draw):
        shapes[0] = draw(st.sampled_from([[shapes[0][0] + 1, dims[0]], [shapes[0][0]], []]))
    rows = [float_array(draw, s, dtype) for s in shapes]
    invalid = layout_problem(counts, send_pos, dims)
    if not invalid and shapes != expected_shapes:
        invalid = "rows that do not fit the layout"

    def check(out):
        size = vector_size(counts, dims)
        expect(out[0]["shape"] == (size,), f"vectors {out[0]['shape']}, expected ({size},)")

    kwargs = {"rows": rows, "counts": counts, "send_pos": send_pos}
    return Case("sok_lite_pack_rows", kwargs, draw(st.booleans()), invalid, check)


@st.composite
def reduce_for_owner(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    dims = [draw(st.integers(0, 3)) for _ in range(draw(st.integers(1, 3)))]
    message, splits = id_message(draw, len(dims))
    n_attr = len(dims)
    dims = mutate_dims(draw, dims)
    if rare(draw, 16):
        dims = []
    segments = parse_id_message(message, splits, len(dims))
    size = (
        0 if segments is None else sum(c * dims[s % len(dims)] for s, (_, c) in enumerate(segments))
    )
    invalid = "a malformed id message" if segments is None else ""
    if not invalid and (len(dims) != n_attr or any(d < 0 for d in dims)):
        invalid = "dims of the wrong length or a negative dim"
    if rare(draw):
        size += 1
        invalid = invalid or "a gradient message of the wrong size"
    grads = float_array(draw, [max(min(size, 64), 0)], dtype)
    if size > 64:
        invalid = invalid or "a gradient message of the wrong size"

    def check(out):
        expect(len(out) == 2 * n_attr, f"{len(out)} outputs for N={n_attr}")
        for t in range(n_attr):
            rows, values = out[t]["value"], out[n_attr + t]
            expect(rows.ndim == 1 and len(set(rows.tolist())) == rows.size, "rows not distinct")
            expected = (rows.size, dims[t])
            expect(values["shape"] == expected, f"values {values['shape']}, expected {expected}")

    kwargs = {"grads": grads, "message": message, "splits": splits, "N": n_attr, "dims": dims}
    return Case("sok_lite_reduce_for_owner", kwargs, draw(st.booleans()), invalid, check)
