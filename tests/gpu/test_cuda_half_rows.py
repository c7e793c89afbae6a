"""The 16-bit table launchers of kernels/cuda against NumPy: gathers widen exactly; an optimizer
step is the float32 step (gpu_reference) rounded back, float16 to nearest even and bfloat16 with
the bits sok_lite/tables/key_hash.py mirrors, so the GPU rounds exactly as the CPU kernels do.

Needs CuPy and a CUDA device (skipped otherwise), as test_cuda_kernels.py.
"""

import importlib.util
import subprocess

import gpu_lib
import gpu_reference as ref
import numpy as np
import pytest

cp = gpu_lib.cupy_or_skip()

BF16, FP16 = 0, 1


def load_key_hash():
    # By path: importing the sok_lite package would import TensorFlow.
    path = gpu_lib.ROOT / "sok_lite" / "tables" / "key_hash.py"
    spec = importlib.util.spec_from_file_location("key_hash", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


key_hash = load_key_hash()


@pytest.fixture(scope="module")
def kernels():
    if not gpu_lib.lib_path().exists():
        subprocess.run(["bash", str(gpu_lib.ROOT / "tests/gpu/build_harness.sh")], check=True)
    return gpu_lib.Kernels(gpu_lib.load())


def widen(bits, fmt) -> np.ndarray:
    if fmt == FP16:
        return bits.view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def random_bits(rng, shape, fmt) -> np.ndarray:
    values = rng.standard_normal(shape).astype(np.float32)
    if fmt == FP16:
        return values.astype(np.float16).view(np.uint16)
    return (values.view(np.uint32) >> 16).astype(np.uint16)


@pytest.mark.parametrize("fmt", [BF16, FP16])
@pytest.mark.parametrize("dim", [1, 3, 64, 130])
def test_gather_half_rows_widens_exactly(kernels, fmt, dim):
    rng = np.random.default_rng(dim)
    table = random_bits(rng, (300, dim), fmt)
    indices = rng.integers(0, 300, size=1000).astype(np.int64)
    out = cp.full((indices.size, dim), np.nan, dtype=np.float32)
    kernels.gather_half_rows(cp.asarray(table), fmt, cp.asarray(indices), out)
    np.testing.assert_array_equal(out.get(), widen(table[indices], fmt))


CASES = [("sgd", [], 0), ("adam", [0.9, 0.999, 1e-7, 3], 2), ("adagrad", [1e-7, 0], 1)]


@pytest.mark.parametrize("fmt", [BF16, FP16])
@pytest.mark.parametrize("kind,params,num_slots", CASES)
def test_apply_half_rows_rounds_the_float32_step(kernels, fmt, kind, params, num_slots):
    rng = np.random.default_rng(7 + fmt)
    table_rows, dim, n, lr = 200, 37, 60, 0.05
    seed, step, stride, offset = 1234, 3, 2, 1  # rank 1 of 2: global row = 2 * local + 1
    bits = random_bits(rng, (table_rows, dim), fmt)
    slots = [rng.uniform(0.1, 1.0, (table_rows, dim)).astype(np.float32) for _ in range(num_slots)]
    rows = rng.choice(table_rows, size=n, replace=False).astype(np.int64)
    grads = rng.standard_normal((n, dim)).astype(np.float32)
    d_var, d_slots = cp.asarray(bits), [cp.asarray(s) for s in slots]
    kernels.apply_half_rows(
        kind,
        lr,
        params,
        cp.asarray(rows),
        cp.asarray(grads),
        d_var,
        d_slots,
        fmt,
        (seed, step, stride, offset),
    )
    wide = widen(bits, fmt)
    ref.apply_rows(kind, lr, 0.0, params, rows, grads, wide, slots)
    want = bits.copy()
    if fmt == FP16:
        want[rows] = wide[rows].astype(np.float16).view(np.uint16)
    else:
        draws = key_hash.rounding_bits(seed, step, rows * stride + offset, dim)
        want[rows] = ((wide[rows].view(np.uint32) + draws) >> 16).astype(np.uint16)
    # The reference's float32 math may differ from the device's by an ulp (Adam's alpha from
    # np.power): that moves a rounded value by at most one 16-bit step, and only rarely.
    diff = np.abs(d_var.get().astype(np.int32) - want.astype(np.int32))
    assert diff.max() <= 1 and (diff == 0).mean() > 0.999, (diff.max(), (diff != 0).sum())
    for got, expected in zip(d_slots, slots):
        np.testing.assert_allclose(got.get(), expected, rtol=1e-6, atol=1e-7)


RMSPROP_ALL = ("rmsprop", [0.9, 0.5, 1e-7, 1, 0], 3)  # momentum and centered: slot positions


@pytest.mark.parametrize("fmt", [BF16, FP16])
@pytest.mark.parametrize("kind,params,num_slots", CASES[1:] + [RMSPROP_ALL])
def test_apply_half_rows_with_bf16_slots_rounds_them_as_the_cpu(
    kernels, fmt, kind, params, num_slots
):
    """bfloat16 slots: the float32 step rounded back, slot s of the caller's order with the
    draws of columns (s + 1) * dim + c (key_hash.rounding_bits with col0)."""
    rng = np.random.default_rng(17 + fmt)
    table_rows, dim, n, lr = 200, 37, 60, 0.05
    seed, step, stride, offset = 99, 4, 2, 1
    bits = random_bits(rng, (table_rows, dim), fmt)
    slot_bits = [
        (rng.uniform(0.1, 1.0, (table_rows, dim)).astype(np.float32).view(np.uint32) >> 16).astype(
            np.uint16
        )
        for _ in range(num_slots)
    ]
    rows = rng.choice(table_rows, size=n, replace=False).astype(np.int64)
    grads = rng.standard_normal((n, dim)).astype(np.float32)
    d_var, d_slots = cp.asarray(bits), [cp.asarray(s) for s in slot_bits]
    kernels.apply_half_rows(
        kind,
        lr,
        params,
        cp.asarray(rows),
        cp.asarray(grads),
        d_var,
        d_slots,
        fmt,
        (seed, step, stride, offset),
        bf16_slots=True,
    )
    wide = widen(bits, fmt)
    slots = [widen(s, BF16) for s in slot_bits]
    ref.apply_rows(kind, lr, 0.0, params, rows, grads, wide, slots)
    global_rows = rows * stride + offset
    for s, (got, start, expected) in enumerate(zip(d_slots, slot_bits, slots)):
        draws = key_hash.rounding_bits(seed, step, global_rows, dim, col0=(s + 1) * dim)
        want = start.copy()
        want[rows] = ((expected[rows].view(np.uint32) + draws) >> 16).astype(np.uint16)
        # As above: an ulp of float32 difference moves a rounded value by one step, rarely.
        diff = np.abs(got.get().astype(np.int32) - want.astype(np.int32))
        assert diff.max() <= 1 and (diff == 0).mean() > 0.999, (s, diff.max(), (diff != 0).sum())
