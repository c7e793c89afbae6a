"""The RAM tier's hit rate, predicted from the key distribution: the share of looked-up ids a
tiered hash table finds in RAM once it has settled, under its eviction policy.

A distribution is held as (p, w) points: w keys of probability p each, sorted by p descending.
A measured histogram becomes one point per distinct count; Zipf(s) over n keys is exact for
its first ZIPF_EXACT_KEYS keys and a quadrature over the rest, so 1e8 keys take a few thousand
points. Every quantity below is a sum over keys, sum_k f(p_k) = sum_j w_j f(p_j).
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np

# Zipf keys summed one by one; the tail past them is integrated (midpoint rule, whose error
# relative to each key's term is s(s + 1) / (24 k^2) < 1e-8 past 2^12).
ZIPF_EXACT_KEYS = 1 << 12
# The tail's quadrature: Gauss-Legendre nodes per bin of log(key), bins per e-fold of keys.
_NODES = 8
_BINS_PER_E = 8
# A spill moves at least a sixteenth of the RAM rows at once (kernels/core/hash_table_tier.cc):
# between spills RAM refills, and holds on average half a spill fewer rows than the budget allows.
SPILL_FRACTION = 1 / 16
# Halvings of a bracket: 2^-60 of it, below any rounding of the hit rate.
_BISECTIONS = 60


@dataclasses.dataclass(frozen=True)
class KeyDistribution:
    """Key probabilities as points: w[j] keys of probability p[j] each (p descending)."""

    p: np.ndarray
    w: np.ndarray
    ends: np.ndarray = dataclasses.field(init=False, repr=False)  # cumulative w

    def __post_init__(self) -> None:
        object.__setattr__(self, "ends", np.cumsum(self.w))

    @property
    def keys(self) -> float:
        """Keys of nonzero probability."""
        return float(self.w.sum())

    def distinct(self, draws: float) -> float:
        """Expected distinct keys among `draws` independent ids (Poisson: each key is drawn
        with probability 1 - exp(-p draws)); for LRU, the keys seen within `draws` ids."""
        return float(np.dot(self.w, -np.expm1(-self.p * draws)))

    def draws_for(self, distinct: float) -> float:
        """The ids whose expected distinct keys are `distinct` (< keys): distinct()'s inverse."""
        low, high = 0.0, 1.0
        while self.distinct(high) < distinct:
            low, high = high, high * 2
        for _ in range(_BISECTIONS):
            mid = (low + high) / 2
            low, high = (mid, high) if self.distinct(mid) < distinct else (low, mid)
        return (low + high) / 2

    def head(self, keys: float) -> tuple[float, float]:
        """(probability mass, p of the last key) of the `keys` most probable keys."""
        ends = self.ends
        j = int(np.searchsorted(ends, keys))
        if j >= len(ends):
            return 1.0, 0.0
        before = float(ends[j - 1]) if j else 0.0
        mass = float(np.dot(self.w[:j], self.p[:j])) + (keys - before) * float(self.p[j])
        return min(mass, 1.0), float(self.p[j])

    def tail_distinct(self, keys: float, draws: float) -> float:
        """Expected distinct keys outside the `keys` most probable among `draws` ids."""
        ends = self.ends
        j = int(np.searchsorted(ends, keys))
        if j >= len(ends):
            return 0.0
        seen = -np.expm1(-self.p[j:] * draws)
        inside = keys - (float(ends[j - 1]) if j else 0.0)
        return float(np.dot(self.w[j:], seen) - inside * seen[0])


def zipf_distribution(exponent: float, keys: int) -> KeyDistribution:
    """Zipf(exponent) over keys 1..keys: P(k) proportional to k^-exponent."""
    exact = min(keys, ZIPF_EXACT_KEYS)
    p = [np.arange(1, exact + 1, dtype=np.float64)]
    w = [np.ones(exact)]
    if keys > exact:
        # Keys exact+1..keys as the integral over [exact + 1/2, keys + 1/2] in u = log(k).
        lo, hi = math.log(exact + 0.5), math.log(keys + 0.5)
        bins = max(1, math.ceil((hi - lo) * _BINS_PER_E))
        nodes, weights = np.polynomial.legendre.leggauss(_NODES)
        edges = np.linspace(lo, hi, bins + 1)
        half = (edges[1:] - edges[:-1])[:, None] / 2
        u = ((edges[:-1] + edges[1:])[:, None] / 2 + half * nodes).ravel()
        k = np.exp(u)
        p.append(k)
        w.append((half * weights).ravel() * k)  # dk = k du
    ranks, counts = np.concatenate(p), np.concatenate(w)
    unnormed = ranks**-exponent
    return KeyDistribution(unnormed / np.dot(counts, unnormed), counts)


def counts_distribution(counts: np.ndarray) -> KeyDistribution:
    """The distribution of a histogram (counts per key, checked by the caller): one point per
    distinct nonzero count."""
    values, keys = np.unique(counts[counts > 0], return_counts=True)
    values, keys = values[::-1].astype(np.float64), keys[::-1].astype(np.float64)
    return KeyDistribution(values / np.dot(values, keys), keys)


def lru_hit_rate(dist: KeyDistribution, ram_rows: float) -> float:
    """Che's approximation: RAM holds the keys seen within the last T ids, T solving
    distinct(T) = ram_rows; a key of probability p is then found with probability
    1 - exp(-p T). Whole steps change nothing: a step's ids look back over whole steps."""
    if ram_rows >= dist.keys:
        return 1.0
    horizon = dist.draws_for(ram_rows)
    return float(np.dot(dist.w * dist.p, -np.expm1(-dist.p * horizon)))


def lfu_hit_rate(dist: KeyDistribution, ram_rows: float, step_ids: float) -> float:
    """RAM holds the most frequent keys (a row's count of steps seen survives a spill), less the
    rows of the rarer keys the last step read back: K keys with K + tail_distinct(K) =
    ram_rows. Hit rate: their probability mass."""
    if ram_rows >= dist.keys:
        return 1.0
    low, high = 0.0, ram_rows
    for _ in range(_BISECTIONS):
        mid = (low + high) / 2
        if mid + dist.tail_distinct(mid, step_ids) < ram_rows:
            low = mid
        else:
            high = mid
    return dist.head(low)[0]


def predict_hit_rate(
    dist: KeyDistribution, ram_rows: float, policy: str, batch_keys: float | None
) -> float:
    """The hit rate of a table whose RAM holds `ram_rows` of the distribution's keys (over
    all ranks), with `batch_keys` distinct keys a step (None: steps much smaller than RAM)."""
    if ram_rows >= dist.keys:
        return 1.0
    step_ids = 0.0
    if batch_keys:
        step_ids = dist.draws_for(min(batch_keys, dist.keys * (1 - 1e-9)))
    misses = (1 - lru_hit_rate(dist, ram_rows)) * dist.distinct(step_ids) if step_ids else 0.0
    # Spills of max(this step's excess, a sixteenth of RAM): half the spill is free on average.
    held = ram_rows - max(ram_rows * SPILL_FRACTION - misses, 0.0) / 2
    if policy == "lfu":
        return lfu_hit_rate(dist, held, step_ids)
    return lru_hit_rate(dist, held)


def check_distribution(zipf: object, key_counts: object, rows: int, label: str) -> None:
    """Raises ValueError naming the table for a bad zipf exponent or key histogram."""
    if zipf is not None and key_counts is not None:
        raise ValueError(f"'{label}': give zipf or key_counts, not both")
    if zipf is not None:
        if isinstance(zipf, bool) or not isinstance(zipf, numbers.Real):
            raise ValueError(f"'{label}': zipf must be a number >= 0, got {zipf!r}")
        if not math.isfinite(zipf) or zipf < 0:
            raise ValueError(f"'{label}': zipf must be a finite exponent >= 0, got {zipf}")
    if key_counts is not None:
        counts = histogram_counts(key_counts, label)
        if len(counts) > rows:
            raise ValueError(
                f"'{label}': key_counts has {len(counts):,} keys, more than the {rows:,} rows"
            )


def histogram_counts(key_counts: object, label: str) -> np.ndarray:
    """The counts of a histogram (a 1-D array or sequence of counts per key, or a dict of
    key -> count) as a float64 array, checked: not empty, finite, >= 0, not all 0."""
    values = list(key_counts.values()) if isinstance(key_counts, dict) else key_counts
    try:
        counts = np.asarray(values, np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"'{label}': key_counts must be counts per key: {error}") from None
    if counts.ndim != 1 or counts.size == 0:
        raise ValueError(f"'{label}': key_counts must be a non-empty 1-D histogram")
    if not np.all(np.isfinite(counts)) or np.any(counts < 0):
        raise ValueError(f"'{label}': key_counts must be finite counts >= 0")
    if not np.any(counts > 0):
        raise ValueError(f"'{label}': key_counts are all 0: no key is looked up")
    return counts


def distribution_of(
    zipf: float | None, key_counts: object, rows: int, label: str
) -> KeyDistribution | None:
    """The KeyDistribution a spec's zipf or key_counts describes (None: neither given)."""
    if zipf is not None:
        return zipf_distribution(float(zipf), rows)
    if key_counts is not None:
        return counts_distribution(histogram_counts(key_counts, label))
    return None
