"""Checks every launcher of kernels/cuda against the NumPy references, element by element.

Needs CuPy and a CUDA device (skipped otherwise); builds build/gpu/libsok_lite_cuda.so with
build_harness.sh when it is missing. Outputs are filled with NaN before each launch, so an
element the kernel forgets to write fails the comparison.
"""

import subprocess

import gpu_lib
import gpu_reference as ref
import numpy as np
import pytest

cp = gpu_lib.cupy_or_skip()

F32 = np.float32
FORWARD_TOL = {"rtol": 1e-6, "atol": 1e-6}
BACKWARD_TOL = {"rtol": 1e-5, "atol": 1e-5}  # atomics reorder the additions
OPTIMIZER_TOL = {"rtol": 1e-5, "atol": 1e-6}
FTRL_TOL = {"rtol": 1e-4, "atol": 1e-5}  # device powf and host powf may differ by an ulp or two


@pytest.fixture(scope="module")
def kernels():
    if not gpu_lib.lib_path().exists():
        subprocess.run(["bash", str(gpu_lib.ROOT / "tests/gpu/build_harness.sh")], check=True)
    return gpu_lib.Kernels(gpu_lib.load())


def nan_array(shape):
    return cp.full(shape, np.nan, dtype=F32)


def misaligned(host):
    """A device copy of `host` starting 4 bytes past a 16-byte boundary (forces the scalar path)."""
    flat = cp.empty(host.size + 1, dtype=host.dtype)
    view = flat[1:].reshape(host.shape)
    view[...] = cp.asarray(host)
    assert view.data.ptr % 16 != 0
    return view


def make_batch(rng, batch, max_ids, num_unique, weighted):
    counts = rng.integers(0, max_ids + 1, size=batch)
    counts[rng.random(batch) < 0.2] = 0  # empty samples must combine to zeros
    row_splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(row_splits[-1])
    inverse = rng.integers(0, num_unique, size=n).astype(np.int32)
    weights = rng.uniform(0.1, 2.0, size=n).astype(F32) if weighted else None
    return row_splits, inverse, weights


def to_device(*arrays):
    return [None if a is None else cp.asarray(a) for a in arrays]


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("weighted", [False, True])
def test_sample_scales(kernels, combiner, weighted):
    rng = np.random.default_rng(1)
    row_splits, _, weights = make_batch(rng, 300, 12, 50, weighted)
    d_splits, d_weights = to_device(row_splits, weights)
    scale = nan_array(row_splits.size - 1)
    kernels.sample_scales(d_splits, d_weights, combiner, scale)
    expected = ref.sample_scales(row_splits, weights, combiner)
    np.testing.assert_allclose(scale.get(), expected, **FORWARD_TOL)


@pytest.mark.parametrize("dim", [1, 3, 4, 12, 128, 130])
@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("aligned", [True, False])
def test_combine_forward(kernels, dim, combiner, weighted, aligned):
    rng = np.random.default_rng(dim * 7 + weighted)
    num_unique = 97
    row_splits, inverse, weights = make_batch(rng, 257, 9, num_unique, weighted)
    rows = rng.standard_normal((num_unique, dim)).astype(F32)
    scale = ref.sample_scales(row_splits, weights, combiner)
    d_rows = cp.asarray(rows) if aligned else misaligned(rows)
    d_inverse, d_splits, d_weights, d_scale = to_device(inverse, row_splits, weights, scale)
    out = nan_array((row_splits.size - 1, dim))
    kernels.combine_forward(d_rows, d_inverse, d_splits, d_weights, d_scale, out)
    expected = ref.combine_forward(rows, inverse, row_splits, weights, scale)
    np.testing.assert_allclose(out.get(), expected, **FORWARD_TOL)
    empty = np.diff(row_splits) == 0
    assert empty.any() and not out.get()[empty].any()


@pytest.mark.parametrize("dim", [1, 3, 4, 12, 128, 130])
@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("aligned", [True, False])
def test_combine_backward(kernels, dim, combiner, weighted, aligned):
    rng = np.random.default_rng(dim * 11 + weighted)
    num_unique = 61  # hot rows: many positions per row exercise the atomics
    row_splits, inverse, weights = make_batch(rng, 257, 9, num_unique, weighted)
    grad_out = rng.standard_normal((row_splits.size - 1, dim)).astype(F32)
    scale = ref.sample_scales(row_splits, weights, combiner)
    d_grad = cp.asarray(grad_out) if aligned else misaligned(grad_out)
    d_inverse, d_splits, d_weights, d_scale = to_device(inverse, row_splits, weights, scale)
    grad_rows = nan_array((num_unique + 5, dim))  # 5 rows no position uses: must come out 0
    kernels.combine_backward(d_grad, d_inverse, d_splits, d_weights, d_scale, grad_rows)
    expected = ref.combine_backward(grad_out, inverse, row_splits, weights, scale, num_unique + 5)
    np.testing.assert_allclose(grad_rows.get(), expected, **BACKWARD_TOL)


def test_combine_empty_batch(kernels):
    splits = cp.zeros(1, dtype=cp.int64)
    empty_f = cp.zeros(0, dtype=F32)
    empty_i = cp.zeros(0, dtype=cp.int32)
    out = cp.zeros((0, 8), dtype=F32)
    kernels.combine_forward(cp.zeros((4, 8), F32), empty_i, splits, None, empty_f, out)
    grad_rows = nan_array((4, 8))
    kernels.combine_backward(out, empty_i, splits, None, empty_f, grad_rows)
    assert not grad_rows.get().any()


@pytest.mark.parametrize("dim", [1, 3, 4, 128, 130])
@pytest.mark.parametrize("aligned", [True, False])
def test_gather_rows(kernels, dim, aligned):
    rng = np.random.default_rng(dim)
    table = rng.standard_normal((300, dim)).astype(F32)
    indices = rng.integers(0, 300, size=1000).astype(np.int64)
    d_table = cp.asarray(table) if aligned else misaligned(table)
    out = nan_array((indices.size, dim))
    kernels.gather_rows(d_table, cp.asarray(indices), out)
    np.testing.assert_array_equal(out.get(), table[indices])


def initial_slots(rng, kind, shape, count):
    """Values the optimizer can start from (accumulators positive, centered rms well posed)."""
    slots = [rng.uniform(-0.1, 0.1, size=shape).astype(F32) for _ in range(count)]
    if kind in ("adam", "amsgrad", "adamax", "adadelta"):
        slots[1:] = [np.abs(s) for s in slots[1:]]
    if kind == "adadelta":
        slots[0] = np.abs(slots[0])
    if kind in ("adagrad", "ftrl"):
        slots[0] = rng.uniform(0.1, 1.0, size=shape).astype(F32)
    if kind == "rmsprop":
        slots[0] = rng.uniform(0.5, 1.0, size=shape).astype(F32)
    return slots


@pytest.mark.parametrize("kind,params,num_slots", ref.OPTIMIZER_CASES)
@pytest.mark.parametrize("dim", [3, 8, 128])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_apply_rows(kernels, kind, params, num_slots, dim, weight_decay):
    rng = np.random.default_rng(dim + num_slots)
    table_rows, n, lr = 400, 150, 0.05
    var = rng.standard_normal((table_rows, dim)).astype(F32)
    slots = initial_slots(rng, kind, (table_rows, dim), num_slots)
    d_var = cp.asarray(var)
    d_slots = [cp.asarray(s) for s in slots]
    for _ in range(2):  # the second step starts from updated slots
        rows = rng.choice(table_rows, size=n, replace=False).astype(np.int64)
        grads = rng.standard_normal((n, dim)).astype(F32)
        kernels.apply_rows(
            kind, lr, weight_decay, params, cp.asarray(rows), cp.asarray(grads), d_var, d_slots
        )
        ref.apply_rows(kind, lr, weight_decay, params, rows, grads, var, slots)
    tol = FTRL_TOL if kind == "ftrl" else OPTIMIZER_TOL
    np.testing.assert_allclose(d_var.get(), var, **tol)
    for got, expected in zip(d_slots, slots):
        np.testing.assert_allclose(got.get(), expected, **tol)


def test_apply_rows_skips_negative_rows(kernels):
    """A negative row (a hash-table key without a stored row) is left alone, whatever repeats."""
    rng = np.random.default_rng(11)
    var = rng.standard_normal((50, 8)).astype(F32)
    slots = initial_slots(rng, "adam", (50, 8), 2)
    rows = np.array([3, -1, 7, -1, 20], np.int64)
    grads = rng.standard_normal((rows.size, 8)).astype(F32)
    d_var, d_slots = cp.asarray(var), [cp.asarray(s) for s in slots]
    params = [0.9, 0.999, 1e-7, 1]
    kernels.apply_rows(
        "adam", 0.05, 0.0, params, cp.asarray(rows), cp.asarray(grads), d_var, d_slots
    )
    kept = rows >= 0
    ref.apply_rows("adam", 0.05, 0.0, params, rows[kept], grads[kept], var, slots)
    np.testing.assert_allclose(d_var.get(), var, **OPTIMIZER_TOL)
    for got, expected in zip(d_slots, slots):
        np.testing.assert_allclose(got.get(), expected, **OPTIMIZER_TOL)


def test_mark_rows(kernels):
    """tracker[row] = value for each given row, negative rows skipped, the rest untouched."""
    rng = np.random.default_rng(12)
    tracker = rng.integers(-5, 5, 1000).astype(np.int64)
    rows = rng.choice(1000, 300, replace=False).astype(np.int64)
    rows[::7] = -1
    d_tracker = cp.asarray(tracker)
    kernels.mark_rows(cp.asarray(rows), 41, d_tracker)
    tracker[rows[rows >= 0]] = 41
    np.testing.assert_array_equal(d_tracker.get(), tracker)
    kernels.mark_rows(cp.zeros(0, cp.int64), 42, d_tracker)  # no rows: nothing changes
    np.testing.assert_array_equal(d_tracker.get(), tracker)


def test_apply_rows_rejects_bad_arguments(kernels):
    var = cp.zeros((4, 4), F32)
    rows = cp.arange(2, dtype=cp.int64)
    grads = cp.zeros((2, 4), F32)
    slot = cp.zeros((4, 4), F32)
    assert kernels.apply_rows_rc(99, 0.1, 0.0, [], rows, grads, var, []) != 0
    assert (
        kernels.apply_rows_rc("adam", 0.1, 0.0, [0.9, 0.999, 1e-7, 1], rows, grads, var, [slot])
        != 0
    )
    assert kernels.apply_rows_rc("adam", 0.1, 0.0, [0.9], rows, grads, var, [slot, slot]) != 0
    assert (
        kernels.apply_rows_rc("rmsprop", 0.1, 0.0, [0.9, 0.5, 1e-7, 0, 0], rows, grads, var, [slot])
        != 0
    )
    # Fewer parameters than the kind reads (adagrad: epsilon and eps_outside).
    assert kernels.apply_rows_rc("adagrad", 0.1, 0.0, [1e-7], rows, grads, var, [slot]) != 0
    assert kernels.apply_rows_rc("adadelta", 0.1, 0.0, [0.9], rows, grads, var, [slot, slot]) != 0
    assert kernels.apply_rows_rc("sgd", 0.1, 0.0, [], rows, grads, var, []) == 0


def test_bad_sizes_return_errors(kernels):
    lib = kernels.lib
    assert lib.sok_lite_cuda_combine_forward(None, 0, None, None, None, None, 1, None, None) != 0
    assert lib.sok_lite_cuda_gather_rows(None, 4, None, -1, None, None) != 0
    assert lib.sok_lite_cuda_sample_scales(None, None, 1, 7, None, None) != 0
