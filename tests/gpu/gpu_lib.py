"""ctypes bindings of build/gpu/libsok_lite_cuda.so (kernels/cuda/sok_lite_cuda.h) on CuPy arrays.

Every wrapper launches on CuPy's current stream and raises RuntimeError on a non-zero
cudaError_t. The library path can be overridden with SOK_LITE_CUDA_LIB.
"""

import ctypes
import os
from pathlib import Path

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
}

_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_SIGNATURES = {
    "sok_lite_cuda_sample_scales": [_P, _P, _I64, ctypes.c_int, _P, _P],
    "sok_lite_cuda_combine_forward": [_P, _I64, _P, _P, _P, _P, _I64, _P, _P],
    "sok_lite_cuda_combine_backward": [_P, _I64, _P, _P, _I64, _P, _P, _I64, _P, _P],
    "sok_lite_cuda_gather_rows": [_P, _I64, _P, _I64, _P, _P],
    "sok_lite_cuda_apply_rows": [
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
        _P,
    ],
}


def lib_path() -> Path:
    return Path(os.environ.get("SOK_LITE_CUDA_LIB", DEFAULT_LIB))


def load(path=None) -> ctypes.CDLL:
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
        c_params = (ctypes.c_double * max(len(params), 1))(*params)
        c_slots = (_P * max(len(slots), 1))(*[_ptr(s) for s in slots])
        kind_id = OPTIMIZERS.get(kind, kind) if isinstance(kind, str) else kind
        return self.lib.sok_lite_cuda_apply_rows(
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
            _stream(),
        )

    def apply_rows(self, kind, lr, weight_decay, params, rows, grads, var, slots):
        rc = self.apply_rows_rc(kind, lr, weight_decay, params, rows, grads, var, slots)
        _check(f"apply_rows({kind})", rc)
