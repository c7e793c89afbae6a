"""Fuzz cases for the lookup, row-initializer, table-assign and optimizer ops (see
op_fuzz_cases.py)."""

import numpy as np
from hypothesis import strategies as st

from tests.ops.fuzz.op_fuzz_cases import (
    OPTIMIZER_KINDS,
    Case,
    expect,
    float_array,
    floats,
    hyper_vector,
    int_array,
    ints,
    maybe_wrong_dtype,
    mutate_row_splits,
    num_slots_for,
    rare,
    row_splits_problem,
    scalar,
    sizes,
    valid_row_splits,
    variable_spec,
)

COMBINERS = ["sum", "mean", "sqrtn", "max", ""]


@st.composite
def row_splits_from_row_ids(draw):
    row_ids = int_array(draw, max_rank=2)
    if draw(st.booleans()):
        row_ids = np.sort(row_ids, axis=None).reshape(row_ids.shape)
    nrows = scalar(draw, sizes())
    flat = row_ids.ravel().tolist()
    invalid = ""
    if nrows.ndim == 0:
        if nrows < 0 or any(r < 0 or r >= nrows for r in flat):
            invalid = "a row id outside [0, nrows) or a negative nrows"
        elif any(b < a for a, b in zip(flat, flat[1:])):
            invalid = "row ids out of order"

    def check(out):
        splits = out[0]["value"]
        expect(splits.shape == (int(nrows) + 1,), f"row_splits shape {splits.shape}")
        expected = np.concatenate([[0], np.cumsum(np.bincount(flat, minlength=int(nrows)))])
        expect(np.array_equal(splits, expected), f"row_splits {splits} for row ids {flat}")

    kwargs = {"row_ids": maybe_wrong_dtype(draw, row_ids), "nrows": nrows, "table_name": "t"}
    return Case("sok_lite_row_splits_from_row_ids", kwargs, draw(st.booleans()), invalid, check)


@st.composite
def unique_ids(draw):
    n_tables = draw(st.integers(1, 3))
    ids, splits, problems = [], [], []
    num_rows = [draw(st.sampled_from([10, -1, 0, 3, 2**62])) for _ in range(n_tables)]
    hotness = [draw(st.sampled_from([0, 2, 1, -1])) for _ in range(n_tables)]
    for t in range(n_tables):
        ids.append(int_array(draw, max_rank=2))
        splits.append(mutate_row_splits(draw, valid_row_splits(draw, ids[t].size)))
        problem = row_splits_problem(splits[t], ids[t].size)
        if not problem:
            s, flat = splits[t].ravel(), ids[t].ravel()
            if num_rows[t] >= 0 and any(i < 0 or i >= num_rows[t] for i in flat.tolist()):
                problem = "an id out of range"
            elif hotness[t] > 0 and np.diff(s).max(initial=0) > hotness[t]:
                problem = "a sample longer than hotness"
        problems.append(problem)
    if rare(draw):
        num_rows.append(5)
    if rare(draw):
        hotness.pop()
    if rare(draw):
        splits.append(np.array([0], np.int64))
    lists_ok = len(num_rows) == len(hotness) == len(splits) == n_tables

    def check(out):
        expect(len(out) == 2 * n_tables, f"{len(out)} outputs for {n_tables} tables")
        for t in range(n_tables):
            unique, inverse = out[t]["value"], out[n_tables + t]["value"]
            expect(unique.ndim == 1 and unique.size <= ids[t].size, f"unique {unique.shape}")
            expect(len(set(unique.tolist())) == unique.size, "unique ids repeat")
            expect(inverse.shape == ids[t].shape, f"inverse {inverse.shape} for {ids[t].shape}")
            expect(np.array_equal(unique[inverse], ids[t]), "unique[inverse] != ids")

    kwargs = {
        "ids": [maybe_wrong_dtype(draw, a) for a in ids],
        "row_splits": splits,
        "num_rows": num_rows,
        "hotness": hotness,
        "table_names": [f"t{t}" for t in range(draw(st.integers(0, n_tables)))],
    }
    invalid = next((p for p in problems if p), "") if lists_ok else "list lengths differ"
    return Case("sok_lite_unique_ids", kwargs, draw(st.booleans()), invalid, check)


@st.composite
def gather_rows(draw):
    n_tables = draw(st.integers(1, 2))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    handles, indices, problems = [], [], []
    for _ in range(n_tables):
        spec = variable_spec(draw, dtype=dtype)
        handles.append(spec)
        indices.append(int_array(draw))
        rows = spec["shape"][0] if spec["shape"] else 0
        well_formed = spec["resource"] == "variable" and spec["dtype"] == dtype
        if well_formed and len(spec["shape"]) == 2:
            bad = [i for i in indices[-1].ravel().tolist() if i < 0 or i >= rows]
            problems.append(f"row {bad[0]} out of range" if bad else "")
        else:
            problems.append("")
    if rare(draw, 12):
        handles[0] = np.zeros([2, 2], np.float32)  # not a resource at all

    def check(out):
        for t, spec in enumerate(handles):
            rows = out[t]["value"]
            expect(rows.shape == (indices[t].size, spec["shape"][1]), f"rows {rows.shape}")
            fill = np.asarray(spec["fill"], dtype)
            expect(np.all((rows == fill) | (np.isnan(rows) & np.isnan(fill))), "wrong values")

    kwargs = {
        "handles": handles,
        "indices": [maybe_wrong_dtype(draw, a) for a in indices],
        "dtype": dtype,
        "table_names": ["a", "b"][: draw(st.integers(0, n_tables))],
        "per_sample": draw(st.booleans()),  # only the wording of a bad id's error differs
    }
    invalid = next((p for p in problems if p), "")
    return Case("sok_lite_gather_rows", kwargs, draw(st.booleans()), invalid, check)


def _segments(draw, num_unique: int, dtype):
    """(inverse, row_splits, weights, problem) of one table."""
    n = draw(st.integers(0, 6))
    values = st.integers(0, max(num_unique - 1, 0))
    if num_unique == 0 or rare(draw):
        values = st.sampled_from([-1, num_unique, 2**31 - 1, -(2**31)])
    inverse = np.array(draw(st.lists(values, min_size=n, max_size=n)), np.int32)
    splits = mutate_row_splits(draw, valid_row_splits(draw, n))
    weights = np.zeros([0], dtype)
    if draw(st.booleans()):
        weights = float_array(draw, [n + (1 if rare(draw) else 0)], dtype)
    problem = row_splits_problem(splits, n)
    if not problem and any(i < 0 or i >= num_unique for i in inverse.tolist()):
        problem = "an inverse index out of range"
    if not problem and weights.size not in (0, n):
        problem = "weights do not match the ids"
    return inverse, splits, weights, problem


@st.composite
def segment_combine(draw, grad: bool = False):
    n_tables = draw(st.integers(1, 2))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    data, inverse, splits, weights, num_unique, problems = [], [], [], [], [], []
    combiners = [draw(st.sampled_from(COMBINERS[:3])) for _ in range(n_tables)]
    if rare(draw):
        combiners[-1] = draw(st.sampled_from(COMBINERS[3:]))
    for _ in range(n_tables):
        u = draw(st.integers(0, 4))
        inv, rs, w, problem = _segments(draw, u, dtype)
        batch = max(rs.size - 1, 0)
        if grad and rare(draw):
            batch += 1
            problem = problem or "gradient rows do not match the batch"
        shape = [batch if grad else u, draw(st.integers(0, 3))]
        if rare(draw):
            shape = draw(st.sampled_from([[shape[0]], [shape[0], 2, 2], []]))
        data.append(float_array(draw, shape, dtype))
        # The gradient op takes the unique count as an input: huge and negative ones too.
        u_in = draw(st.sampled_from([2**40, -1, 2**62])) if grad and rare(draw) else u
        if u_in < 0:
            problem = "a negative num_unique"
        inverse.append(inv)
        splits.append(rs)
        weights.append(w)
        num_unique.append(scalar(draw, st.just(u_in)))
        problems.append(problem)
    invalid = next((p for p in problems if p), "")
    if any(c not in COMBINERS[:3] for c in combiners):
        invalid = "an unknown combiner"

    def check(out):
        for t in range(n_tables):
            rows = int(num_unique[t]) if grad else splits[t].size - 1
            expected = (rows, data[t].shape[1])
            expect(out[t]["shape"] == expected, f"output {out[t]['shape']}, expected {expected}")

    kwargs = {"grads" if grad else "rows": data, "inverse": inverse, "row_splits": splits}
    kwargs["weights"] = weights
    if grad:
        kwargs["num_unique"] = num_unique
    kwargs["combiners"] = combiners
    op = "sok_lite_segment_combine_grad" if grad else "sok_lite_segment_combine"
    return Case(op, kwargs, draw(st.booleans()), invalid, check)


@st.composite
def init_rows(draw):
    row_ids = int_array(draw, max_rank=2)
    dim = draw(sizes())
    kind = draw(st.sampled_from(["constant", "random_normal", "truncated_normal", "bogus"]))
    kind = "random_uniform" if kind == "bogus" and not rare(draw, 3) else kind
    dtype = draw(st.sampled_from(["float32", "float64"]))
    a, b = draw(floats()), draw(floats())
    invalid = "an unknown initializer kind" if kind == "bogus" else ""

    def check(out):
        rows = out[0]
        expect(rows["shape"] == (row_ids.size, dim), f"rows {rows['shape']}")
        if kind == "constant" and rows["value"] is not None:
            value = np.asarray(np.float32(a), dtype)  # `a` is a float32 attribute
            same = (rows["value"] == value) | (np.isnan(rows["value"]) & np.isnan(value))
            expect(bool(np.all(same)), "constant rows differ from a")

    kwargs = {"row_ids": row_ids, "dtype": dtype, "dim": dim, "kind": kind, "seed": draw(ints())}
    kwargs |= {"a": a, "b": b}
    return Case("sok_lite_init_rows", kwargs, draw(st.booleans()), invalid, check)


@st.composite
def assign_table(draw):
    dtype = draw(st.sampled_from(["float32", "float64", "float16"]))
    rows, dim = draw(st.integers(0, 5)), draw(st.integers(0, 3))
    table = variable_spec(draw, rows, dim, dtype)
    shape = [rows, dim]
    if rare(draw):
        shape = draw(st.sampled_from([[rows + 1, dim], [rows, dim + 1], [rows * dim], []]))
    value = maybe_wrong_dtype(draw, float_array(draw, shape, np.dtype(dtype)))
    invalid = ""
    if table["resource"] == "missing":
        invalid = "a table that does not exist"
    elif value.dtype.name not in ("float32", "float64", "float16", "int64"):
        invalid = f"a {value.dtype.name} value"
    elif table["dtype"] != value.dtype.name or table["shape"] != list(value.shape):
        invalid = f"a {value.dtype.name} {list(value.shape)} value for a {table['dtype']} table"
        invalid += f" of shape {table['shape']}"
    kwargs = {"table": table, "value": value}
    return Case("sok_lite_assign_table", kwargs, draw(st.booleans()), invalid)


@st.composite
def sparse_apply(draw):
    kind = draw(st.sampled_from([*OPTIMIZER_KINDS, "bogus"]))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    rows, dim = draw(st.integers(0, 5)), draw(st.integers(0, 3))
    var = variable_spec(draw, rows, dim, dtype)
    hyper = hyper_vector(draw, kind)
    num_slots = num_slots_for(kind, hyper) + (draw(st.sampled_from([1, -1])) if rare(draw) else 0)
    slots = [variable_spec(draw, rows, dim, dtype) for _ in range(max(num_slots, 0))]
    if slots and rare(draw):
        slots[0] = var  # a slot aliasing the variable itself
    indices = int_array(draw, st.integers(0, max(rows - 1, 0)) if not rare(draw) else None)
    grads_shape = [indices.size, dim]
    if rare(draw):
        grads_shape = draw(st.sampled_from([[indices.size + 1, dim], [0, dim], [indices.size]]))
    if rare(draw):
        grads_shape = [indices.size, dim + 1]
    grads = float_array(draw, grads_shape, np.dtype(dtype))
    well_formed = all(
        s["resource"] == "variable" and s["shape"] == [rows, dim] and s["dtype"] == dtype
        for s in [var, *slots]
    )
    invalid = ""
    if kind == "bogus":
        invalid = "an unknown optimizer kind"
    elif hyper.size < 2 or len(slots) != num_slots_for(kind, hyper):
        invalid = "a hyper vector or slot list that does not fit the optimizer"
    elif grads_shape != [indices.size, dim]:
        invalid = f"gradient of shape {grads_shape} for {indices.size} rows of width {dim}"
    elif well_formed and any(i < 0 or i >= rows for i in indices.tolist()):
        invalid = "a row out of range"
    trackers = []
    if draw(st.booleans()):  # the rows-changed tracker: int64 [rows], rarely anything else
        tracker = {"resource": "variable", "shape": [rows], "dtype": "int64", "fill": -1.0}
        if rare(draw):
            tracker["shape"] = draw(st.sampled_from([[rows + 1], [rows, 1], []]))
        if rare(draw):
            tracker["dtype"] = draw(st.sampled_from(["int32", "float32"]))
        if rare(draw, 12):
            tracker["resource"] = "missing"
        if not invalid and tracker != {**tracker, "shape": [rows], "dtype": "int64"}:
            invalid = f"a tracker of shape {tracker['shape']} and dtype {tracker['dtype']}"
        elif not invalid and tracker["resource"] == "missing":
            invalid = "a tracker that does not exist"
        trackers.append(tracker)
    kwargs = {"var": var, "slots": slots, "indices": indices, "grads": grads, "hyper": hyper}
    kwargs |= {"step": np.array(draw(ints()), np.int64), "kind": kind, "var_name": "v"}
    kwargs |= {"trackers": trackers}
    return Case("sok_lite_sparse_apply", kwargs, draw(st.booleans()), invalid)
