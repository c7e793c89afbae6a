"""ctypes bindings of build/gpu/libsok_lite_cuda.so (kernels/cuda/sok_lite_cuda.h) on CuPy arrays.

Every wrapper launches on CuPy's current stream and raises RuntimeError on a non-zero
cudaError_t. The library path can be overridden with SOK_LITE_CUDA_LIB.
"""

import ctypes
import os
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_LIB = ROOT / "build" / "gpu" / "libsok_lite_cuda.so"

COMBINERS = {"sum": 0, "mean": 1, "sqrtn": 2}
OPTIMIZERS = {
    "sgd": 0,
    "momentum": 1,
    "nesterov": 2,
    "adam": 3,
    "amsgrad": 4,
    "adagrad": 5,
    "rmsprop": 6,
    "ftrl": 7,
    "adamax": 8,
    "adadelta": 9,
}

_P = ctypes.c_void_p
_I64 = ctypes.c_int64
# (kind, learning_rate, weight_decay, params, num_params, dim, rows, grads, n, var, slots,
# num_slots): the arguments every optimizer launcher starts with.
_APPLY_ARGS = [
    ctypes.c_int,
    ctypes.c_double,
    ctypes.c_double,
    ctypes.POINTER(ctypes.c_double),
    ctypes.c_int,
    _I64,
    _P,
    _P,
    _I64,
    _P,
    ctypes.POINTER(_P),
    ctypes.c_int,
]
# The 16-bit launchers add (format, seed, step, row_stride, row_offset); both take the same.
_APPLY_HALF_ROWS = [*_APPLY_ARGS, ctypes.c_int, ctypes.c_uint64, _I64, _I64, _I64, _P]
_SIGNATURES = {
    "sok_lite_cuda_sample_scales": [_P, _P, _I64, ctypes.c_int, _P, _P],
    "sok_lite_cuda_combine_forward": [_P, _I64, _P, _P, _P, _P, _I64, _P, _P],
    "sok_lite_cuda_combine_backward": [_P, _I64, _P, _P, _I64, _P, _P, _I64, _P, _P],
    "sok_lite_cuda_gather_rows": [_P, _I64, _P, _I64, _P, _P],
    "sok_lite_cuda_gather_half_rows": [_P, ctypes.c_int, _I64, _P, _I64, _P, _P],
    "sok_lite_cuda_apply_half_rows": _APPLY_HALF_ROWS,
    "sok_lite_cuda_apply_half_rows_bf16_slots": _APPLY_HALF_ROWS,
    "sok_lite_cuda_apply_rows": [*_APPLY_ARGS, _P],
    "sok_lite_cuda_mark_rows": [_P, _I64, _I64, _P, _P],
}


class RowInit(ctypes.Structure):
    """SokLiteCudaRowInit."""

    _fields_ = [
        ("kind", ctypes.c_int),
        ("seed", ctypes.c_uint64),
        ("a", ctypes.c_double),
        ("b", ctypes.c_double),
    ]


class TableStruct(ctypes.Structure):
    """SokLiteCudaTable (field order and types as in sok_lite_cuda.h)."""

    _fields_ = [
        ("keys", _P),
        ("state", _P),
        ("last_seen", _P),
        ("values", _P),
        ("slots", _P * 3),
        ("slot_init", ctypes.c_float * 3),
        ("num_slots", ctypes.c_int),
        ("dim", _I64),
        ("capacity", _I64),
        ("max_size", _I64),
        ("size", _P),
        ("updated", _P),
    ]


_TP = ctypes.POINTER(TableStruct)
_SIGNATURES.update(
    {
        "sok_lite_cuda_check_ragged": [_P, _I64, _I64, _P, _I64, _I64, _P, _I64, _P, _P],
        "sok_lite_cuda_unique_workspace_size": [_I64, ctypes.POINTER(ctypes.c_size_t)],
        "sok_lite_cuda_unique_ids": [_P, _I64, _P, _P, _P, _P, _P, ctypes.c_size_t, _P],
        "sok_lite_cuda_partition_workspace_size": [
            _I64,
            _I64,
            _I64,
            ctypes.POINTER(ctypes.c_size_t),
        ],
        "sok_lite_cuda_partition_by_owner": [
            ctypes.POINTER(_P),
            ctypes.POINTER(_I64),
            ctypes.POINTER(_I64),
            _I64,
            _I64,
            _P,
            _P,
            _P,
            _P,
            _P,
            ctypes.c_size_t,
            _P,
        ],
        "sok_lite_cuda_init_rows": [ctypes.POINTER(RowInit), _P, _I64, _I64, _P, _P],
        "sok_lite_cuda_table_clear": [_TP, _P],
        "sok_lite_cuda_table_find_or_insert": [
            _TP,
            ctypes.POINTER(RowInit),
            _P,
            _I64,
            _I64,
            _P,
            _P,
            _P,
            _P,
        ],
        "sok_lite_cuda_table_find": [_TP, _P, _I64, _P, _P, _P],
        "sok_lite_cuda_table_export": [_TP, _I64, _P, _P, ctypes.POINTER(_P), _P, _P],
        "sok_lite_cuda_table_rehash": [_TP, _TP, _I64, _P, _P],
        "sok_lite_cuda_table_count_since": [_TP, _I64, _P, _P],
        "sok_lite_cuda_table_export_rows": [_TP, _I64, ctypes.c_int, _I64, _P, _P, _P, _P],
        "sok_lite_cuda_table_mark_updated": [_TP, _P, _I64, _I64, _P],
        "sok_lite_cuda_table_store_rows": [_TP, _P, _I64, _P, ctypes.c_int, _P],
        "sok_lite_cuda_table_fill_slot": [_TP, ctypes.c_int, ctypes.c_float, _P],
        "sok_lite_cuda_check_segments": [_P, _P, _P, _P, _I64, _I64, _P, _P],
        "sok_lite_cuda_check_segments_i32": [_P, _P, _P, _P, _I64, _I64, _P, _P],
        "sok_lite_cuda_scatter_rows": [_P, _I64, _P, _I64, _P, _P],
        "sok_lite_cuda_gather_rows_i32": [_P, _I64, _P, _I64, _P, _P],
        "sok_lite_cuda_scatter_add_rows": [_P, _I64, _P, _I64, _P, _P],
    }
)
INIT_KINDS = {"random_normal": 0, "truncated_normal": 1, "random_uniform": 2, "constant": 3}


def cupy_or_skip():
    """CuPy, where it imports and sees a CUDA device; otherwise skips the test module calling
    this at import."""
    import pytest

    cupy = pytest.importorskip("cupy")
    try:
        devices = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        devices = 0
    if devices == 0:
        pytest.skip("no CUDA device", allow_module_level=True)
    return cupy


def lib_path() -> Path:
    return Path(os.environ.get("SOK_LITE_CUDA_LIB", DEFAULT_LIB))


def load(path=None) -> ctypes.CDLL:
    if os.environ.get("SOK_LITE_CUPY_POOL", "1") == "0":
        import cupy

        # Every array its own cudaMalloc: compute-sanitizer only sees an access outside an
        # array when no pool block lies beyond it.
        cupy.cuda.set_allocator(None)
    lib = ctypes.CDLL(str(path or lib_path()))
    for name, argtypes in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
    return lib


def _ptr(array):
    return None if array is None else array.data.ptr


def _stream():
    import cupy

    return cupy.cuda.get_current_stream().ptr


def _apply_args(kind_id, lr, weight_decay, params, rows, grads, var, slots) -> tuple:
    """The arguments every optimizer launcher starts with (_APPLY_ARGS); the tuple keeps the
    ctypes arrays alive for the call."""
    c_params = (ctypes.c_double * max(len(params), 1))(*params)
    c_slots = (_P * max(len(slots), 1))(*[_ptr(s) for s in slots])
    return (
        kind_id,
        lr,
        weight_decay,
        c_params,
        len(params),
        var.shape[1],
        _ptr(rows),
        _ptr(grads),
        rows.size,
        _ptr(var),
        c_slots,
        len(slots),
    )


def _check(name, rc):
    if rc != 0:
        raise RuntimeError(f"{name} returned cudaError_t {rc}")


class Kernels:
    """Thin wrappers taking CuPy arrays; shapes are read from the arrays."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib

    def sample_scales(self, row_splits, weights, combiner, scale):
        batch = row_splits.size - 1
        rc = self.lib.sok_lite_cuda_sample_scales(
            _ptr(row_splits), _ptr(weights), batch, COMBINERS[combiner], _ptr(scale), _stream()
        )
        _check("sample_scales", rc)

    def combine_forward(self, rows, inverse, row_splits, weights, scale, out):
        dim = out.shape[1]
        rc = self.lib.sok_lite_cuda_combine_forward(
            _ptr(rows),
            dim,
            _ptr(inverse),
            _ptr(row_splits),
            _ptr(weights),
            _ptr(scale),
            out.shape[0],
            _ptr(out),
            _stream(),
        )
        _check("combine_forward", rc)

    def combine_backward(self, grad_out, inverse, row_splits, weights, scale, grad_rows):
        rc = self.lib.sok_lite_cuda_combine_backward(
            _ptr(grad_out),
            grad_out.shape[1],
            _ptr(inverse),
            _ptr(row_splits),
            grad_out.shape[0],
            _ptr(weights),
            _ptr(scale),
            grad_rows.shape[0],
            _ptr(grad_rows),
            _stream(),
        )
        _check("combine_backward", rc)

    def gather_rows(self, table, indices, out):
        rc = self.lib.sok_lite_cuda_gather_rows(
            _ptr(table), table.shape[1], _ptr(indices), indices.size, _ptr(out), _stream()
        )
        _check("gather_rows", rc)

    def apply_rows_rc(self, kind, lr, weight_decay, params, rows, grads, var, slots) -> int:
        """Returns the raw error code (for the argument-checking tests)."""
        kind_id = OPTIMIZERS.get(kind, kind) if isinstance(kind, str) else kind
        args = _apply_args(kind_id, lr, weight_decay, params, rows, grads, var, slots)
        return self.lib.sok_lite_cuda_apply_rows(*args, _stream())

    def apply_rows(self, kind, lr, weight_decay, params, rows, grads, var, slots):
        rc = self.apply_rows_rc(kind, lr, weight_decay, params, rows, grads, var, slots)
        _check(f"apply_rows({kind})", rc)

    def mark_rows(self, rows, value, tracker):
        rc = self.lib.sok_lite_cuda_mark_rows(
            _ptr(rows), rows.size, value, _ptr(tracker), _stream()
        )
        _check("mark_rows", rc)

    # --- 16-bit tables: uint16 bit patterns, format 0 bfloat16 / 1 float16 ----------------------

    def gather_half_rows(self, table, fmt, indices, out):
        rc = self.lib.sok_lite_cuda_gather_half_rows(
            _ptr(table), fmt, table.shape[1], _ptr(indices), indices.size, _ptr(out), _stream()
        )
        _check("gather_half_rows", rc)

    def apply_half_rows(
        self, kind, lr, params, rows, grads, var, slots, fmt, rounding, bf16_slots=False
    ):
        """rounding: (seed, step, row_stride, row_offset); bf16_slots: slots hold bfloat16
        bit patterns (uint16) instead of float32."""
        launcher = (
            self.lib.sok_lite_cuda_apply_half_rows_bf16_slots
            if bf16_slots
            else self.lib.sok_lite_cuda_apply_half_rows
        )
        args = _apply_args(OPTIMIZERS[kind], lr, 0.0, params, rows, grads, var, slots)
        rc = launcher(*args, fmt, *rounding, _stream())
        _check(f"apply_half_rows({kind})", rc)

    # --- ids -----------------------------------------------------------------------------------

    def check_ragged(
        self, row_splits, ids=None, num_rows=-1, hotness=0, inverse=None, num_unique=0
    ):
        """The four first-failing indices (numpy uint64; 2^64 - 1 = passed)."""
        import cupy

        bad = cupy.zeros(4, dtype=cupy.uint64)
        n = (ids if ids is not None else inverse).size
        rc = self.lib.sok_lite_cuda_check_ragged(
            _ptr(row_splits),
            row_splits.size - 1,
            n,
            _ptr(ids),
            num_rows,
            hotness,
            _ptr(inverse),
            num_unique,
            _ptr(bad),
            _stream(),
        )
        _check("check_ragged", rc)
        return bad.get()

    def unique_ids(self, ids, unique, inverse, counts=None) -> int:
        """Fills the given (pre-allocated) outputs; returns the number of unique ids."""
        import cupy

        size = ctypes.c_size_t()
        _check(
            "unique_workspace_size", self.lib.sok_lite_cuda_unique_workspace_size(ids.size, size)
        )
        workspace = cupy.empty(max(size.value, 1), dtype=cupy.uint8)
        num_unique = cupy.full(1, -7, dtype=cupy.int64)
        rc = self.lib.sok_lite_cuda_unique_ids(
            _ptr(ids),
            ids.size,
            _ptr(unique),
            _ptr(inverse),
            _ptr(counts),
            _ptr(num_unique),
            _ptr(workspace),
            size.value,
            _stream(),
        )
        _check("unique_ids", rc)
        return int(num_unique.get()[0])

    def partition_by_owner(self, uniques, owners, num_ranks, counts, message, splits, send_pos):
        import cupy

        tables = len(uniques)
        total = sum(u.size for u in uniques)
        size = ctypes.c_size_t()
        rc = self.lib.sok_lite_cuda_partition_workspace_size(total, num_ranks, tables, size)
        _check("partition_workspace_size", rc)
        workspace = cupy.empty(max(size.value, 1), dtype=cupy.uint8)
        rc = self.lib.sok_lite_cuda_partition_by_owner(
            (_P * tables)(*[_ptr(u) for u in uniques]),
            (_I64 * tables)(*[u.size for u in uniques]),
            (_I64 * tables)(*owners),
            tables,
            num_ranks,
            _ptr(counts),
            _ptr(message),
            _ptr(splits),
            _ptr(send_pos),
            _ptr(workspace),
            size.value,
            _stream(),
        )
        _check("partition_by_owner", rc)

    def check_segments(self, values, begin, counts, limit):
        """Per segment the first failing j (numpy uint64; 2^64 - 1 = passed)."""
        import cupy

        begin, limit = cupy.asarray(begin, cupy.int64), cupy.asarray(limit, cupy.int64)
        ends = cupy.asarray(np.cumsum(np.asarray(counts, np.int64)), cupy.int64)
        bad = cupy.zeros(max(begin.size, 1), dtype=cupy.uint64)
        fn = self.lib.sok_lite_cuda_check_segments
        if values.dtype == np.int32:
            fn = self.lib.sok_lite_cuda_check_segments_i32
        total = int(ends[-1]) if ends.size else 0
        rc = fn(
            _ptr(values),
            _ptr(begin),
            _ptr(ends),
            _ptr(limit),
            begin.size,
            total,
            _ptr(bad),
            _stream(),
        )
        _check("check_segments", rc)
        return bad.get()[: begin.size]

    def init_rows(self, kind, seed, a, b, ids, out):
        init = RowInit(INIT_KINDS[kind], seed, a, b)
        rc = self.lib.sok_lite_cuda_init_rows(
            ctypes.byref(init), _ptr(ids), ids.size, out.shape[1], _ptr(out), _stream()
        )
        _check("init_rows", rc)

    # --- row copies ----------------------------------------------------------------------------

    def copy_rows(self, which, src, positions, dst):
        """which: scatter_rows | gather_rows_i32 | scatter_add_rows."""
        fn = getattr(self.lib, f"sok_lite_cuda_{which}")
        rc = fn(_ptr(src), dst.shape[1], _ptr(positions), positions.size, _ptr(dst), _stream())
        _check(which, rc)


class DeviceTable:
    """A SokLiteCudaTable whose arrays are CuPy arrays owned by this object."""

    def __init__(self, lib, capacity, dim, max_size=None, slot_init=(), track_updates=False):
        import cupy

        self.lib = lib
        self.keys = cupy.zeros(capacity, dtype=cupy.int64)
        self.state = cupy.zeros(capacity, dtype=cupy.int32)
        self.last_seen = cupy.zeros(capacity, dtype=cupy.int64)
        self.values = cupy.full((capacity, dim), np.nan, dtype=cupy.float32)
        self.slots = [cupy.full((capacity, dim), np.nan, cupy.float32) for _ in slot_init]
        self.size_buf = cupy.zeros(1, dtype=cupy.int64)
        self.updated = cupy.full(capacity, -7, dtype=cupy.int64) if track_updates else None
        self.struct = TableStruct(
            keys=_ptr(self.keys),
            state=_ptr(self.state),
            last_seen=_ptr(self.last_seen),
            values=_ptr(self.values),
            slots=(_P * 3)(*[_ptr(s) for s in self.slots]),
            slot_init=(ctypes.c_float * 3)(*slot_init),
            num_slots=len(slot_init),
            dim=dim,
            capacity=capacity,
            max_size=capacity * 3 // 4 if max_size is None else max_size,
            size=_ptr(self.size_buf),
            updated=_ptr(self.updated),
        )
        self.clear()

    def clear(self):
        _check(
            "table_clear", self.lib.sok_lite_cuda_table_clear(ctypes.byref(self.struct), _stream())
        )

    def size(self) -> int:
        return int(self.size_buf.get()[0])

    def find_or_insert(self, keys, step, slots_out, values_out, init) -> int:
        """Returns the number of keys that found no room."""
        import cupy

        failed = cupy.full(1, -7, dtype=cupy.int64)
        kind, seed, a, b = init
        c_init = RowInit(INIT_KINDS[kind], seed, a, b)
        rc = self.lib.sok_lite_cuda_table_find_or_insert(
            ctypes.byref(self.struct),
            ctypes.byref(c_init),
            _ptr(keys),
            keys.size,
            step,
            _ptr(slots_out),
            _ptr(values_out),
            _ptr(failed),
            _stream(),
        )
        _check("table_find_or_insert", rc)
        return int(failed.get()[0])

    def find(self, keys, slots_out, values_out=None):
        rc = self.lib.sok_lite_cuda_table_find(
            ctypes.byref(self.struct),
            _ptr(keys),
            keys.size,
            _ptr(slots_out),
            _ptr(values_out),
            _stream(),
        )
        _check("table_find", rc)

    def export(self, max_out):
        """(count, keys, values, slots) with count possibly above max_out."""
        import cupy

        keys = cupy.full(max_out, -7, dtype=cupy.int64)
        values = cupy.full((max_out, self.struct.dim), np.nan, dtype=cupy.float32)
        slots = [cupy.full((max_out, self.struct.dim), np.nan, cupy.float32) for _ in self.slots]
        count = cupy.full(1, -7, dtype=cupy.int64)
        c_slots = (_P * max(len(slots), 1))(*[_ptr(s) for s in slots])
        rc = self.lib.sok_lite_cuda_table_export(
            ctypes.byref(self.struct),
            max_out,
            _ptr(keys),
            _ptr(values),
            c_slots,
            _ptr(count),
            _stream(),
        )
        _check("table_export", rc)
        return int(count.get()[0]), keys, values, slots

    def rehash_into(self, dst, min_last_seen) -> int:
        import cupy

        failed = cupy.full(1, -7, dtype=cupy.int64)
        rc = self.lib.sok_lite_cuda_table_rehash(
            ctypes.byref(self.struct),
            ctypes.byref(dst.struct),
            min_last_seen,
            _ptr(failed),
            _stream(),
        )
        _check("table_rehash", rc)
        return int(failed.get()[0])

    def count_since(self, since_step) -> int:
        import cupy

        count = cupy.full(1, -7, dtype=cupy.int64)
        rc = self.lib.sok_lite_cuda_table_count_since(
            ctypes.byref(self.struct), since_step, _ptr(count), _stream()
        )
        _check("table_count_since", rc)
        return int(count.get()[0])

    def export_rows(self, since_step, with_slots, max_out):
        """(count, keys, rows) in the CPU layout; count possibly above max_out."""
        import cupy

        width = self.struct.dim * (1 + (len(self.slots) if with_slots else 0))
        keys = cupy.full(max_out, -7, dtype=cupy.int64)
        rows = cupy.full((max_out, width), np.nan, dtype=cupy.float32)
        count = cupy.full(1, -7, dtype=cupy.int64)
        rc = self.lib.sok_lite_cuda_table_export_rows(
            ctypes.byref(self.struct),
            since_step,
            int(with_slots),
            max_out,
            _ptr(keys),
            _ptr(rows),
            _ptr(count),
            _stream(),
        )
        _check("table_export_rows", rc)
        return int(count.get()[0]), keys, rows

    def mark_updated(self, slots, step):
        rc = self.lib.sok_lite_cuda_table_mark_updated(
            ctypes.byref(self.struct), _ptr(slots), slots.size, step, _stream()
        )
        _check("table_mark_updated", rc)

    def store_rows(self, slots, rows, with_slots):
        rc = self.lib.sok_lite_cuda_table_store_rows(
            ctypes.byref(self.struct),
            _ptr(slots),
            slots.size,
            _ptr(rows),
            int(with_slots),
            _stream(),
        )
        _check("table_store_rows", rc)

    def fill_slot(self, j, value):
        rc = self.lib.sok_lite_cuda_table_fill_slot(ctypes.byref(self.struct), j, value, _stream())
        _check("table_fill_slot", rc)
