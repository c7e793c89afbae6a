"""Hypothesis strategies of malformed (and some well-formed) inputs for every raw sok_lite op.

Each strategy draws a `Case`: the op, its kwargs (NumPy arrays, attrs and resource specs, see
op_fuzz_worker.py), whether to run it inside a tf.function, why the input must be rejected
(when the fuzzer can tell) and a sanity check of the outputs of a successful call. Rare anomalies
are drawn so that shrinking moves away from them: the minimal failing case has only the anomaly
that matters.
"""

import dataclasses
from collections.abc import Callable

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
EDGE_INTS = [2**31 - 1, 2**31, 2**40, 2**62, INT64_MAX, INT64_MIN, -(2**31)]
# Sizes either small or so large that allocating them fails at once: a mid-sized buffer (say
# 2^30 elements) would be allocated and written, which only measures the machine's memory.
HUGE_SIZES = [-1, -7, 2**40, 2**62, INT64_MAX, INT64_MIN]
FLOAT_EDGES = [float("nan"), float("inf"), float("-inf"), -0.0, 3.4e38, 1e-30]
OPTIMIZER_KINDS = ["sgd", "momentum", "nesterov", "adam", "amsgrad", "adagrad", "rmsprop", "ftrl"]
OPTIMIZER_KINDS += ["adamax", "adadelta"]
# Optimizer parameters after [learning_rate, weight_decay] (kernels/core/optimizer.h).
NUM_PARAMS = {"sgd": 0, "momentum": 1, "nesterov": 1, "adagrad": 2, "adam": 4, "amsgrad": 4}
NUM_PARAMS |= {"rmsprop": 5, "ftrl": 5, "adamax": 4, "adadelta": 2}


@dataclasses.dataclass
class Case:
    """One raw op call and what the fuzzer knows about it."""

    op: str
    kwargs: dict
    graph: bool = False
    invalid: str = ""  # why the kernel must reject the input; "" when it may accept it
    check: Callable[[list], None] | None = dataclasses.field(default=None, repr=False)

    def call(self) -> dict:
        return {"op": self.op, "kwargs": self.kwargs, "graph": self.graph}

    def __repr__(self) -> str:
        mode = "inside tf.function" if self.graph else "eagerly"
        args = ",\n    ".join(f"{k}={_code(v)}" for k, v in self.kwargs.items())
        return f"ops().{self.op}(\n    {args},\n)  # run {mode}"


def _code(value) -> str:
    """Python source that rebuilds value (arrays as np.array(..., dtype))."""
    if isinstance(value, np.ndarray):
        values = repr(value.tolist())
        if value.dtype.kind == "f":
            values = values.replace("nan", "np.nan").replace("inf", "np.inf")
        return f"np.array({values}, {value.dtype.name!r})"
    if isinstance(value, list):
        return "[" + ", ".join(_code(v) for v in value) + "]"
    return repr(value)


def rare(draw, one_in: int = 8) -> bool:
    """True once in `one_in` draws; shrinks to False."""
    return draw(st.integers(0, one_in - 1)) == one_in - 1


def ints(lo: int = -2, hi: int = 8):
    """Small ints (ids, counts, ranks) or int32/int64 edge values."""
    return st.one_of(st.integers(lo, hi), st.sampled_from(EDGE_INTS))


def sizes(hi: int = 6):
    """A size: small, negative or too large to allocate."""
    return st.one_of(st.integers(0, hi), st.sampled_from(HUGE_SIZES))


def floats():
    """float32-representable values, NaN and the infinities included."""
    return st.one_of(st.floats(-4, 4, width=32), st.sampled_from(FLOAT_EDGES))


def int_array(draw, values=None, dtype=np.int64, max_rank: int = 1, max_side: int = 6):
    """A vector of `values` (default `ints()`), rarely of another rank up to max_rank."""
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=1, min_side=0, max_side=max_side))
    if max_rank != 1 and rare(draw):
        shape = draw(hnp.array_shapes(min_dims=0, max_dims=max_rank, min_side=0, max_side=3))
    info = np.iinfo(dtype)
    elements = (ints() if values is None else values).filter(lambda v: info.min <= v <= info.max)
    return draw(hnp.arrays(dtype, shape, elements=elements))


def float_array(draw, shape, dtype=np.float32):
    """An array of `floats()` of the given shape."""
    to_dtype = np.dtype(dtype).type
    return draw(hnp.arrays(dtype, shape, elements=floats().map(lambda v: float(to_dtype(v)))))


def maybe_wrong_dtype(draw, array):
    """The array, or rarely the same values in a dtype the op does not take."""
    if not rare(draw, 12):
        return array
    dtype = draw(st.sampled_from(["float32", "int32", "bool", "float64", "uint8"]))
    if array.dtype == np.dtype(dtype):
        dtype = "float16"
    with np.errstate(all="ignore"):
        return array.astype(dtype)


def scalar(draw, values, dtype=np.int64):
    """A scalar array, or rarely a vector where the op wants a scalar."""
    if rare(draw):
        return np.array(draw(st.lists(values, max_size=3)), dtype)
    return np.array(draw(values), dtype)


def valid_row_splits(draw, n: int) -> np.ndarray:
    """Row splits of some batch over n ids."""
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    return np.array([0, *cuts, n], np.int64)


def mutate_row_splits(draw, splits: np.ndarray) -> np.ndarray:
    """Valid row splits, or rarely one of the ways they can be malformed."""
    if not rare(draw, 4):
        return splits
    how = draw(st.sampled_from(["start", "decrease", "end", "empty", "huge", "rank2"]))
    s = splits.copy()
    if how == "start":
        s[0] = draw(st.sampled_from([1, -1, INT64_MIN]))
    elif how == "decrease" and s.size > 2:
        s[1], s[-2] = s[-1] + 1, -1
    elif how == "end":
        s[-1] += draw(st.sampled_from([1, -1, 2**62]))
    elif how == "empty":
        s = np.zeros([0], np.int64)
    elif how == "huge":
        s = np.array([0, INT64_MAX, s[-1]], np.int64)
    else:
        s = s.reshape([1, -1])
    return s


def row_splits_problem(splits: np.ndarray, n: int) -> str:
    """Why flat row splits are malformed for n ids, or ""."""
    s = splits.ravel().tolist()
    if not s:
        return "empty row_splits"
    if s[0] != 0 or s[-1] != n or any(b < a for a, b in zip(s, s[1:])):
        return f"row_splits {s} do not split {n} ids"
    return ""


def expect(condition: bool, message: str) -> None:
    """An assert that survives `python -O`: the output checks must always run."""
    if not condition:
        raise AssertionError(message)


def variable_spec(draw, rows: int | None = None, dim: int | None = None, dtype="float32"):
    """A resource spec: mostly a 2-D variable, rarely another shape or dtype, or missing."""
    rows = draw(st.integers(0, 5)) if rows is None else rows
    dim = draw(st.integers(0, 4)) if dim is None else dim
    fill = draw(st.sampled_from([0.5, float("nan"), -2.0]))
    spec = {"resource": "variable", "shape": [rows, dim], "dtype": dtype, "fill": fill}
    if rare(draw):
        spec["shape"] = draw(st.sampled_from([[rows], [rows, dim, 2], []]))
    if rare(draw):
        spec["dtype"] = draw(st.sampled_from(["float64", "int32", "float16", "float32"]))
    if rare(draw, 12):
        spec["resource"] = "missing"
    return spec


def hyper_vector(draw, kind: str) -> np.ndarray:
    """[lr, weight_decay, params...] of the right length, or rarely a short or long one."""
    n = 2 + NUM_PARAMS.get(kind, 0)
    if rare(draw, 5):
        n = draw(st.integers(0, 8))
    values = st.one_of(st.sampled_from([0.1, 0.0, 0.9, 0.999, 1e-7, 1.0, -0.5]), floats())
    return np.array(draw(st.lists(values, min_size=n, max_size=n)), np.float64)


def num_slots_for(kind: str, hyper: np.ndarray) -> int:
    """The slot count the kernel requires (NumSlots in kernels/core/optimizer.cc)."""
    p = hyper.ravel()[2:].tolist()
    if kind == "rmsprop":
        return 1 + (len(p) > 1 and p[1] > 0) + (len(p) > 3 and p[3] != 0)
    slots = {"sgd": 0, "momentum": 1, "nesterov": 1, "adagrad": 1, "adam": 2, "ftrl": 2}
    slots |= {"adamax": 2, "adadelta": 2}
    return slots.get(kind, 3 if kind == "amsgrad" else 0)
