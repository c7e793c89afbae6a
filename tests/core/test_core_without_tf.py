"""kernels/core without TensorFlow: core_capi.cc (a C ABI over the core functions and
kernels/core/cpu_gpu_rules.h, built by conftest.py) is called through ctypes,
against NumPy references on random inputs; sok_lite/tables/key_hash.py is checked against the
C++ key hash and owner rules. Skipped only where no C++ compiler exists.
"""

import ctypes
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.core.capi_build import ROOT, bind, load_key_hash

I64_MIN, I64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
EXTREMES = np.array([I64_MIN, I64_MIN + 1, -(2**32), -2, -1, 0, 1, 2, 2**32, I64_MAX - 1, I64_MAX])
RANKS = [1, 2, 3, 7, 8, 1000, 2**31 + 11]


key_hash = load_key_hash()

P = np.ctypeslib.ndpointer
I64, U64, I32, F32, F64, U16, U32 = (
    P(np.int64, flags="C"),
    P(np.uint64, flags="C"),
    P(np.int32, flags="C"),
    P(np.float32, flags="C"),
    P(np.float64, flags="C"),
    P(np.uint16, flags="C"),
    P(np.uint32, flags="C"),
)
c_i64, c_u64, c_int, c_double = ctypes.c_int64, ctypes.c_uint64, ctypes.c_int, ctypes.c_double
SIGNATURES = {
    "sok_core_advise_huge_pages": (ctypes.c_int, [ctypes.c_void_p, c_i64]),
    "sok_core_splitmix64": (None, [U64, c_i64, U64]),
    "sok_core_splitmix64_finalizer": (None, [U64, c_i64, U64]),
    "sok_core_key_hash": (None, [I64, c_i64, U64]),
    "sok_core_hash_owner": (None, [I64, c_i64, c_i64, I64]),
    "sok_core_row_owner": (None, [I64, c_i64, c_i64, I64, I64]),
    "sok_core_owner": (None, [c_i64, I64, c_i64, c_i64, I64, I64]),
    "sok_core_init_uniform": (None, [c_u64, I64, c_i64, c_i64, c_u64, F64]),
    "sok_core_combiner_code": (c_int, [ctypes.c_char_p]),
    "sok_core_optimizer_code": (c_int, [ctypes.c_char_p]),
    "sok_core_unique_ids": (c_i64, [I64, c_i64, I64, I32]),
    "sok_core_combine": (None, [F32, c_i64, I32, I64, c_i64, ctypes.c_void_p, c_int, F32]),
    "sok_core_apply_rows": (
        None,
        [c_int, c_double, c_double, F64, c_int, c_i64, I64, F32, c_i64, F32]
        + [ctypes.POINTER(ctypes.c_void_p), c_int],
    ),
    "sok_core_half_to_float": (None, [c_int, U16, c_i64, F32]),
    "sok_core_float_to_bfloat16_nearest": (None, [F32, c_i64, U16]),
    "sok_core_float_to_bfloat16_stochastic": (None, [F32, U32, c_i64, U16]),
    "sok_core_float_to_float16_nearest": (None, [F32, c_i64, U16]),
    "sok_core_rounding_bits": (None, [c_u64, c_i64, c_i64, c_i64, U32]),
    "sok_core_apply_half_rows": (
        None,
        [c_int, c_double, c_double, F64, c_int, c_i64, I64, F32, c_i64, U16]
        + [ctypes.POINTER(ctypes.c_void_p), c_int, c_int, c_u64, c_i64, c_i64, c_i64],
    ),
    "sok_core_apply_half_rows_bf16_slots": (
        None,
        [c_int, c_double, c_double, F64, c_int, c_i64, I64, F32, c_i64, U16]
        + [ctypes.POINTER(ctypes.c_void_p), c_int, c_int, c_u64, c_i64, c_i64, c_i64],
    ),
}


@pytest.fixture(scope="module")
def core(core_capi_library):
    return bind(core_capi_library, SIGNATURES)


@pytest.fixture(scope="module", params=["dispatched", "baseline"])
def isa_core(request):
    """The core library as built (the functions of isa_clones.h dispatched at load time: the AVX2
    clone on a CPU that has it) and built without the clones (baseline x86-64 code)."""
    if request.param == "dispatched":
        return request.getfixturevalue("core")
    return bind(request.getfixturevalue("baseline_core_capi_library"), SIGNATURES)


def many_keys(rng, n=20000):
    wide = rng.integers(I64_MIN, I64_MAX, n, dtype=np.int64, endpoint=True)
    small = rng.integers(-1000, 1000, n // 4, dtype=np.int64)
    return np.concatenate([EXTREMES, wide, small, np.arange(5000, dtype=np.int64)])


# --- the key hash and owner rules: C++ header vs sok_lite/tables/key_hash.py ------------------


def test_splitmix64_matches(core):
    x = np.random.default_rng(0).integers(0, 2**64, 20000, dtype=np.uint64, endpoint=False)
    x = np.concatenate([x, np.array([0, 1, 2**63, 2**64 - 1], np.uint64)])
    got = np.empty_like(x)
    core.sok_core_splitmix64(x, x.size, got)
    np.testing.assert_array_equal(got, key_hash.splitmix64(x))
    # The finalizer is the step without its increment.
    core.sok_core_splitmix64_finalizer(x, x.size, got)
    np.testing.assert_array_equal(got, key_hash.splitmix64(x - np.uint64(0x9E3779B97F4A7C15)))


def test_key_hash_and_hash_owner_match(core):
    keys = many_keys(np.random.default_rng(1))
    hashes = np.empty(keys.size, np.uint64)
    core.sok_core_key_hash(keys, keys.size, hashes)
    np.testing.assert_array_equal(hashes, key_hash.key_hash(keys))
    for n in RANKS:
        owners, local = np.empty_like(keys), np.empty_like(keys)
        core.sok_core_hash_owner(keys, keys.size, n, owners)
        np.testing.assert_array_equal(owners, key_hash.hash_owner(keys, n))
        assert owners.min() >= 0 and owners.max() < n
        core.sok_core_owner(-2, keys, keys.size, n, owners, local)  # the exchange's Owner
        np.testing.assert_array_equal(owners, key_hash.hash_owner(keys, n))
        np.testing.assert_array_equal(local, keys)  # a key keeps its value on its rank


def test_hash_owner_spreads_sequential_keys():
    owners = key_hash.hash_owner(np.arange(30000), 3)
    assert np.bincount(owners, minlength=3).min() > 9500


def test_row_owner_and_local_row_match(core):
    rng = np.random.default_rng(2)
    ids = np.concatenate([np.arange(3000), rng.integers(0, I64_MAX, 5000), [I64_MAX]])
    ids = ids.astype(np.int64)
    for n in RANKS:
        rank, local = np.empty_like(ids), np.empty_like(ids)
        core.sok_core_row_owner(ids, ids.size, n, rank, local)
        np.testing.assert_array_equal(rank, key_hash.row_owner(ids, n))
        np.testing.assert_array_equal(local, key_hash.local_row(ids, n))
        np.testing.assert_array_equal(local * n + rank, ids)
        core.sok_core_owner(-1, ids, ids.size, n, rank, local)  # the exchange's Owner
        np.testing.assert_array_equal(rank, key_hash.row_owner(ids, n))
        np.testing.assert_array_equal(local, key_hash.local_row(ids, n))
    rank, local = np.empty_like(ids), np.empty_like(ids)
    core.sok_core_owner(5, ids, ids.size, 8, rank, local)  # localized on rank 5
    assert (rank == 5).all()
    np.testing.assert_array_equal(local, ids)


def test_init_uniform_is_the_splitmix_draw(core):
    """The counter-based draw of initial rows, as serving_init rebuilds it from the same mix."""
    mix = key_hash.splitmix64
    ids = many_keys(np.random.default_rng(3), 2000)
    for seed, col, draw in [(0, 0, 0), (20261129, 5, 1), (2**64 - 1, 1023, 7)]:
        got = np.empty(ids.size, np.float64)
        core.sok_core_init_uniform(seed, ids, ids.size, col, draw, got)
        h = mix(mix(np.uint64(seed)) ^ ids.view(np.uint64))
        h = mix(h ^ np.uint64(col * 0x100000001B3 % 2**64) ^ np.uint64(draw << 40))
        want = ((h >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53
        np.testing.assert_array_equal(got, want)
        assert ((got > 0) & (got < 1)).all()


def test_codes(core):
    names = ["sum", "mean", "sqrtn"]
    assert [core.sok_core_combiner_code(n.encode()) for n in names] == [0, 1, 2]
    optimizers = ["sgd", "momentum", "nesterov", "adam", "amsgrad", "adagrad", "rmsprop", "ftrl"]
    optimizers += ["adamax", "adadelta"]
    assert [core.sok_core_optimizer_code(n.encode()) for n in optimizers] == list(range(10))
    assert core.sok_core_combiner_code(b"max") == -1
    assert core.sok_core_optimizer_code(b"lamb") == -1


# --- a few core functions vs NumPy ------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_unique_ids(core, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 3000))
    pool = np.concatenate([EXTREMES, rng.integers(I64_MIN, I64_MAX, 50, dtype=np.int64)])
    ids = rng.choice(pool, n) if seed % 2 else rng.integers(0, 100, n).astype(np.int64)
    unique, inverse = np.empty(n, np.int64), np.empty(n, np.int32)
    count = core.sok_core_unique_ids(ids, n, unique, inverse)
    values, first = np.unique(ids, return_index=True)
    np.testing.assert_array_equal(unique[:count], values[np.argsort(first)])  # first-seen order
    np.testing.assert_array_equal(unique[inverse], ids)


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("weighted", [False, True])
def test_segment_combine(core, combiner, weighted):
    rng = np.random.default_rng(len(combiner) + weighted)
    batch, dim, num_unique = 64, 13, 40
    counts = rng.integers(0, 6, batch)
    row_splits = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(row_splits[-1])
    inverse = rng.integers(0, num_unique, n).astype(np.int32)
    rows = rng.standard_normal((num_unique, dim)).astype(np.float32)
    weights = rng.uniform(0.1, 2.0, n).astype(np.float32) if weighted else None
    out = np.full((batch, dim), np.nan, np.float32)
    w_ptr = None if weights is None else weights.ctypes.data
    code = core.sok_core_combiner_code(combiner.encode())
    core.sok_core_combine(rows, dim, inverse, row_splits, batch, w_ptr, code, out)
    w = np.ones(n) if weights is None else weights.astype(np.float64)
    want = np.zeros((batch, dim))
    for b in range(batch):
        k = slice(row_splits[b], row_splits[b + 1])
        total = (w[k, None] * rows[inverse[k]]).sum(axis=0)
        denom = {"sum": 1.0, "mean": w[k].sum(), "sqrtn": np.sqrt((w[k] ** 2).sum())}[combiner]
        want[b] = total / denom if denom != 0 else 0.0
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def _combine_in_order(rows, inverse, splits, weights, combiner):
    """The forward combine in float32, one term after another in position order: what the
    kernel computes, whatever its vector width."""
    f32 = np.float32
    out = np.zeros((len(splits) - 1, rows.shape[1]), f32)
    for b in range(len(splits) - 1):
        acc, denom = None, f32(0)
        for k in range(splits[b], splits[b + 1]):
            w = f32(1) if weights is None else weights[k]
            term = rows[inverse[k]] if weights is None else w * rows[inverse[k]]
            acc = term if acc is None else acc + term
            denom = denom + w
        if acc is not None:
            out[b] = acc if combiner == "sum" else acc * (f32(1) / denom)
    return out


@pytest.mark.parametrize("dim", [1, 7, 16, 24, 64, 100])
@pytest.mark.parametrize("weighted", [False, True])
def test_combine_bit_for_bit_in_position_order(isa_core, dim, weighted):
    """Samples of up to 40 ids (several groups of registers) and widths that leave a remainder
    after each vector block: the same bits as the plain float32 loop, clones or not."""
    rng = np.random.default_rng(dim + 1000 * weighted)
    batch, num_unique = 50, 30
    splits = np.concatenate([[0], np.cumsum(rng.integers(0, 41, batch))]).astype(np.int64)
    n = int(splits[-1])
    inverse = rng.integers(0, num_unique, n).astype(np.int32)
    rows = rng.standard_normal((num_unique, dim)).astype(np.float32)
    weights = rng.uniform(0.1, 2.0, n).astype(np.float32) if weighted else None
    w_ptr = None if weights is None else weights.ctypes.data
    for combiner in ["sum", "mean"]:
        out = np.full((batch, dim), np.nan, np.float32)
        code = isa_core.sok_core_combiner_code(combiner.encode())
        isa_core.sok_core_combine(rows, dim, inverse, splits, batch, w_ptr, code, out)
        want = _combine_in_order(rows, inverse, splits, weights, combiner)
        np.testing.assert_array_equal(out, want, err_msg=combiner)


@pytest.mark.parametrize("eps_outside", [0, 1])
def test_adagrad_rows(core, eps_outside):
    rng = np.random.default_rng(10 + eps_outside)
    vocab, dim, n = 50, 7, 20
    lr, wd, eps = 0.1, 0.01, 1e-7
    var = rng.standard_normal((vocab, dim)).astype(np.float32)
    acc = np.full((vocab, dim), 0.1, np.float32)
    rows = rng.choice(vocab, n, replace=False).astype(np.int64)
    grads = rng.standard_normal((n, dim)).astype(np.float32)
    want_var, want_acc = var.copy(), acc.copy()
    f = np.float32
    w = want_var[rows]
    w = w - w * f(wd) * f(lr)
    a = want_acc[rows] + grads * grads
    den = np.sqrt(a) + f(eps) if eps_outside else np.sqrt(a + f(eps))
    want_var[rows], want_acc[rows] = w - (f(lr) * grads) / den, a
    params = np.array([eps, eps_outside], np.float64)
    slots = (ctypes.c_void_p * 1)(acc.ctypes.data)
    code = core.sok_core_optimizer_code(b"adagrad")
    core.sok_core_apply_rows(code, lr, wd, params, 2, dim, rows, grads, n, var, slots, 1)
    np.testing.assert_allclose(acc, want_acc, rtol=1e-6)
    np.testing.assert_allclose(var, want_var, rtol=1e-5, atol=1e-6)


# --- 16-bit rows (kernels/core/half_rows.h) vs NumPy --------------------------------------------

BF16, FP16 = 0, 1
ALL_BITS = np.arange(2**16, dtype=np.uint16)


def bf16_widen(bits) -> np.ndarray:
    return (np.asarray(bits, np.uint32) << np.uint32(16)).view(np.float32)


def awkward_floats(rng, n=50000) -> np.ndarray:
    """Random float32 bit patterns (every exponent), the float16 range and its edges, ties."""
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    near = rng.standard_normal(n).astype(np.float32) * np.float32(2.0) ** rng.integers(-26, 17, n)
    fp16 = ALL_BITS[:0x7C00].view(np.float16).astype(np.float64)  # the finite positives
    fp16_ties = ((fp16[:-1] + fp16[1:]) / 2)[::7].astype(np.float32)  # midpoints: exact
    edges = np.array(
        [0.0, -0.0, 65504, 65519.99, 65520, 65536, 2**-24, 2**-25, 2**-25 * 1.0001, 2**-14]
        + [np.inf, -np.inf, np.nan, 3.0e38, -3.4028235e38, 1.401298e-45],
        np.float32,
    )
    return np.concatenate([bits, near.astype(np.float32), fp16_ties, edges, -edges])


def test_half_to_float_is_exact(core):
    out = np.empty(ALL_BITS.size, np.float32)
    core.sok_core_half_to_float(FP16, ALL_BITS, ALL_BITS.size, out)
    np.testing.assert_array_equal(out, ALL_BITS.view(np.float16).astype(np.float32))
    core.sok_core_half_to_float(BF16, ALL_BITS, ALL_BITS.size, out)
    np.testing.assert_array_equal(out, bf16_widen(ALL_BITS))


def test_float16_rounds_to_nearest_even_as_numpy(core):
    x = awkward_floats(np.random.default_rng(20))
    got = np.empty(x.size, np.uint16)
    core.sok_core_float_to_float16_nearest(x, x.size, got)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got.view(np.float16)), nan)
    np.testing.assert_array_equal(got[~nan], want.view(np.uint16)[~nan])


def test_bfloat16_nearest_matches_ml_dtypes(core):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = awkward_floats(np.random.default_rng(21))
    got = np.empty(x.size, np.uint16)
    core.sok_core_float_to_bfloat16_nearest(x, x.size, got)
    with np.errstate(invalid="ignore"):
        want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    nan = np.isnan(x)
    assert np.isnan(bf16_widen(got[nan])).all()
    np.testing.assert_array_equal(got[~nan], want[~nan])


def test_bfloat16_stochastic_rounding_is_unbiased(core):
    """Over all 2^16 draws, x rounds away from zero exactly (its dropped 16 bits) times: the
    expected result is x; every result is one of the two neighbours of x."""
    rng = np.random.default_rng(22)
    draws = np.arange(2**16, dtype=np.uint32)
    x = np.concatenate([rng.standard_normal(40) * 10.0 ** rng.integers(-30, 30, 40), [1.0, -3.5]])
    for value in x.astype(np.float32):
        got = np.empty(draws.size, np.uint16)
        xs = np.full(draws.size, value, np.float32)
        core.sok_core_float_to_bfloat16_stochastic(xs, draws, draws.size, got)
        toward_zero = np.uint16(value.view(np.uint32) >> 16)
        dropped = int(value.view(np.uint32) & 0xFFFF)
        assert set(np.unique(got).tolist()) <= {int(toward_zero), int(toward_zero) + 1}
        assert int((got != toward_zero).sum()) == dropped, value
        np.testing.assert_allclose(bf16_widen(got).astype(np.float64).mean(), value, rtol=1e-12)
    nan = np.full(3, np.nan, np.float32)
    got = np.empty(3, np.uint16)
    core.sok_core_float_to_bfloat16_stochastic(nan, np.array([0, 1, 65535], np.uint32), 3, got)
    assert np.isnan(bf16_widen(got)).all()


def test_rounding_bits_match_the_mirror(core):
    """RoundingBits is a function of (seed, step, global row, column) only; key_hash mirrors
    it, and its 16-bit draws are spread evenly."""
    dim = 67
    for seed, step, row in [(0, 0, 0), (12345, 7, 99), (2**64 - 1, -1, 2**40 + 3)]:
        got = np.empty(dim, np.uint32)
        core.sok_core_rounding_bits(seed, step, row, dim, got)
        np.testing.assert_array_equal(got, key_hash.rounding_bits(seed, step, [row], dim)[0])
    many = key_hash.rounding_bits(3, 11, np.arange(2000), 64)
    assert many.max() < 2**16
    assert abs(many.mean() / (2**16 - 1) - 0.5) < 0.01
    assert not np.array_equal(many, key_hash.rounding_bits(3, 12, np.arange(2000), 64))


def _apply_half(core, kind, var_bits, slots, rows, grads, p, fmt, seed, step, stride, offset):
    lr, wd = 0.05, 0.0
    slot_ptrs = (ctypes.c_void_p * max(len(slots), 1))(*[s.ctypes.data for s in slots])
    code = core.sok_core_optimizer_code(kind.encode())
    params = np.array(p, np.float64)
    dim = var_bits.shape[1]
    core.sok_core_apply_half_rows(
        code,
        lr,
        wd,
        params,
        len(p),
        dim,
        rows,
        grads,
        rows.size,
        var_bits,
        slot_ptrs,
        len(slots),
        fmt,
        seed,
        step,
        stride,
        offset,
    )
    return lr


@pytest.mark.parametrize("fmt", [BF16, FP16])
def test_half_rows_sgd_and_adam_round_the_float32_update(isa_core, fmt):
    core = isa_core
    rng = np.random.default_rng(23 + fmt)
    vocab, dim, seed, step = 40, 19, 777, 5
    wide = rng.standard_normal((vocab, dim)).astype(np.float32)
    narrow = wide.astype(np.float16) if fmt == FP16 else None
    bits = narrow.view(np.uint16) if fmt == FP16 else (wide.view(np.uint32) >> 16).astype(np.uint16)
    start = narrow.astype(np.float32) if fmt == FP16 else bf16_widen(bits)
    rows = rng.choice(vocab, 12, replace=False).astype(np.int64)
    grads = rng.standard_normal((rows.size, dim)).astype(np.float32)

    def expect_rounded(got_bits, want):
        if fmt == FP16:
            np.testing.assert_array_equal(got_bits, want.astype(np.float16).view(np.uint16))
            return
        draws = key_hash.rounding_bits(seed, step, rows, dim)
        up = ((want.view(np.uint32) + draws) >> 16).astype(np.uint16)
        np.testing.assert_array_equal(got_bits, up)

    # SGD
    var = bits.copy()
    lr = _apply_half(core, "sgd", var, [], rows, grads, [], fmt, seed, step, 1, 0)
    want = start[rows] - grads * np.float32(lr)
    expect_rounded(var[rows], want)
    untouched = np.setdiff1d(np.arange(vocab), rows)
    np.testing.assert_array_equal(var[untouched], bits[untouched])
    # Adam: float32 slots hold the exact float32 state.
    var = bits.copy()
    m, v = np.zeros((vocab, dim), np.float32), np.zeros((vocab, dim), np.float32)
    b1, b2, eps = 0.9, 0.999, 1e-7
    _apply_half(core, "adam", var, [m, v], rows, grads, [b1, b2, eps, step], fmt, seed, step, 1, 0)
    f = np.float32
    want_m = grads * (f(1) - f(b1))
    want_v = grads * grads * (f(1) - f(b2))
    alpha = f(lr) * np.sqrt(f(1) - f(b2) ** f(step)) / (f(1) - f(b1) ** f(step))
    np.testing.assert_allclose(m[rows], want_m, rtol=1e-6)
    np.testing.assert_allclose(v[rows], want_v, rtol=1e-6)
    want = start[rows] - (want_m * alpha) / (np.sqrt(want_v) + f(eps))
    got = bf16_widen(var[rows]) if fmt == BF16 else var[rows].view(np.float16).astype(np.float32)
    ulp = np.float32(2.0**-7 if fmt == BF16 else 2.0**-10) * np.abs(want) + 1e-6
    assert (np.abs(got - want) <= ulp).all()


def test_half_rows_round_alike_on_any_rank_count(core):
    """A row's rounding draws from its GLOBAL row: rank 1 of 2 (local row r = global 2r + 1)
    rounds its rows as one rank holding the whole table does."""
    rng = np.random.default_rng(30)
    vocab, dim = 30, 8
    table = (rng.standard_normal((vocab, dim)).astype(np.float32).view(np.uint32) >> 16).astype(
        np.uint16
    )
    global_rows = np.array([1, 7, 13, 29], np.int64)
    grads = rng.standard_normal((global_rows.size, dim)).astype(np.float32)
    whole = table.copy()
    _apply_half(core, "sgd", whole, [], global_rows, grads, [], BF16, 9, 4, 1, 0)
    shard = table[1::2].copy()
    _apply_half(core, "sgd", shard, [], global_rows // 2, grads, [], BF16, 9, 4, 2, 1)
    np.testing.assert_array_equal(shard, whole[1::2])


def test_without_tensorflow():
    """This module and key_hash.py import no TensorFlow (checked in a fresh interpreter, since
    other test modules of the same run may have imported it)."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('t', {str(Path(__file__))!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "module.key_hash.hash_owner([1, 2, 3], 2)\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert ran.returncode == 0, ran.stdout + ran.stderr


def test_huge_page_advice_keeps_values_and_is_given_once(core, monkeypatch):
    monkeypatch.setenv("SOK_LITE_HUGE_PAGES", "1")  # read once, at this test's first call
    small = np.arange(1 << 16, dtype=np.float32)
    assert core.sok_core_advise_huge_pages(small.ctypes.data, small.nbytes) == 0  # too small
    big = np.arange(20 << 20, dtype=np.float32)  # 80 MiB: several 2 MiB pages inside
    first = core.sok_core_advise_huge_pages(big.ctypes.data, big.nbytes)
    # Whether advice was given depends on the OS; a second call for the same buffer never is.
    assert core.sok_core_advise_huge_pages(big.ctypes.data, big.nbytes) == 0
    np.testing.assert_array_equal(big, np.arange(20 << 20, dtype=np.float32))
    if Path("/sys/kernel/mm/transparent_hugepage").is_dir():  # Linux with THP built in
        assert first == 1


@pytest.mark.parametrize("fmt", [BF16, FP16])
def test_half_rows_with_bf16_slots_round_the_float32_adam_step(isa_core, fmt):
    """bfloat16 slots: widened, the float32 Adam step (NumPy float32, same operation order),
    rounded back stochastically with the draws of columns (s + 1) * dim + c of the row's key."""
    core = isa_core
    rng = np.random.default_rng(41 + fmt)
    vocab, dim, seed, step, stride, offset = 40, 19, 555, 4, 3, 2
    wide = rng.standard_normal((vocab, dim)).astype(np.float32)
    if fmt == FP16:
        bits = wide.astype(np.float16).view(np.uint16)
        start = bits.view(np.float16).astype(np.float32)
    else:
        bits = (wide.view(np.uint32) >> 16).astype(np.uint16)
        start = bf16_widen(bits)
    slot_bits = [
        (rng.uniform(0.01, 1.0, (vocab, dim)).astype(np.float32).view(np.uint32) >> 16).astype(
            np.uint16
        )
        for _ in range(2)
    ]
    m0, v0 = (bf16_widen(b) for b in slot_bits)
    rows = rng.choice(vocab, 12, replace=False).astype(np.int64)
    grads = rng.standard_normal((rows.size, dim)).astype(np.float32)
    var, slots = bits.copy(), [b.copy() for b in slot_bits]
    b1, b2, eps, lr = 0.9, 0.999, 1e-7, 0.05
    ptrs = (ctypes.c_void_p * 2)(*[s.ctypes.data for s in slots])
    code = core.sok_core_optimizer_code(b"adam")
    params = np.array([b1, b2, eps, step], np.float64)
    core.sok_core_apply_half_rows_bf16_slots(
        code,
        lr,
        0.0,
        params,
        4,
        dim,
        rows,
        grads,
        rows.size,
        var,
        ptrs,
        2,
        fmt,
        seed,
        step,
        stride,
        offset,
    )
    f = np.float32
    m = m0[rows] + (grads - m0[rows]) * (f(1) - f(b1))
    v = v0[rows] + (grads * grads - v0[rows]) * (f(1) - f(b2))
    alpha = f(lr) * np.sqrt(f(1) - f(b2) ** f(step)) / (f(1) - f(b1) ** f(step))
    w = start[rows] - (m * alpha) / (np.sqrt(v) + f(eps))
    global_rows = rows * stride + offset

    def stochastic(x, col0):
        draws = key_hash.rounding_bits(seed, step, global_rows, dim, col0=col0)
        return ((x.view(np.uint32) + draws) >> 16).astype(np.uint16)

    if fmt == FP16:
        np.testing.assert_array_equal(var[rows], w.astype(np.float16).view(np.uint16))
    else:
        np.testing.assert_array_equal(var[rows], stochastic(w, 0))
    np.testing.assert_array_equal(slots[0][rows], stochastic(m, dim))
    np.testing.assert_array_equal(slots[1][rows], stochastic(v, 2 * dim))
    untouched = np.setdiff1d(np.arange(vocab), rows)
    for got, before in zip(slots, slot_bits):
        np.testing.assert_array_equal(got[untouched], before[untouched])
