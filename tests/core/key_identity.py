"""Keys that share an identity in the compact disk index (kernels/core/disk_index.h: the top 36
bits of SplitMix64Finalizer(key)), built by inverting the finalizer, for tests that must reach the
shared-identity paths on purpose rather than by chance."""

import numpy as np

from tests.core.capi_build import load_key_hash

key_hash = load_key_hash()

MASK = (1 << 64) - 1
_M1_INV = pow(0xBF58476D1CE4E5B9, -1, 1 << 64)
_M2_INV = pow(0x94D049BB133111EB, -1, 1 << 64)


def finalize(keys) -> np.ndarray:
    """SplitMix64Finalizer of int64 keys (the index's hash), as uint64."""
    x = np.asarray(keys, np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        return key_hash.splitmix64(x - np.uint64(key_hash._GOLDEN))


def _unshift(x: int, s: int) -> int:
    y = x
    for _ in range(64 // s + 1):
        y = x ^ (y >> s)
    return y


def key_for(h: int) -> int:
    """The int64 key whose hash is h (the finalizer is a bijection)."""
    x = _unshift(h, 31)
    x = (x * _M2_INV) & MASK
    x = _unshift(x, 27)
    x = (x * _M1_INV) & MASK
    x = _unshift(x, 30)
    return int(np.array([x], np.uint64).view(np.int64)[0])


def identity(keys) -> np.ndarray:
    """The keys' identities in the compact disk index."""
    return finalize(keys) >> np.uint64(28)


def twins(rng, of, n_each):
    """n_each new keys sharing the identity of each key of `of` (distinct, not in `of`)."""
    out = []
    for h in finalize(of).tolist():
        for low in rng.choice(1 << 28, n_each, replace=False).tolist():
            twin = (h & ~((1 << 28) - 1)) | low
            if twin != h:
                out.append(key_for(twin))
    return np.array(out, np.int64)
