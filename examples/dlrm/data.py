"""Synthetic Criteo-like click logs from a planted logistic model (seeded, counter-based).

Each sample has 13 dense count features and 26 categorical features with Zipf-distributed ids
over vocabularies from 10 rows up to `max_vocabulary`. Its label is drawn from a logistic model
planted over those features, so the best achievable AUC is that of the planted probabilities
(the "oracle" AUC) and training quality is measurable.

Every value is a hash of (seed, split, sample index, column): sample i of the stream is the same
whichever process draws it, so the global batch of a step is the same on 1 or N ranks and each
rank draws only its own share.
"""

import dataclasses

import numpy as np

NUM_DENSE = 13
NUM_CATEGORICAL = 26
SPLITS = ("train", "eval")

# Hash streams: one per kind of random value.
_CATEGORICAL, _DENSE, _LABEL, _EFFECT, _FACTOR = range(1, 6)
_FACTOR_DIM = 4  # width of the planted latent factors of interacting features
_HEAD = 50.0  # ids beyond ~_HEAD carry a weaker effect (rare ids regress to the mean)


def vocabulary_sizes(max_vocabulary: int = 100_000, min_vocabulary: int = 10) -> list[int]:
    """26 vocabulary sizes spaced geometrically from min_vocabulary to max_vocabulary."""
    sizes = np.geomspace(min_vocabulary, max_vocabulary, NUM_CATEGORICAL)
    return [int(round(s)) for s in sizes]


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a bijective scramble of uint64 (wrap-around is intended)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _hash(*parts) -> np.ndarray:
    """A uint64 hash of the broadcast integer arrays `parts`, chained through _mix."""
    h = np.zeros((), np.uint64)
    with np.errstate(over="ignore"):  # numpy warns on scalar wrap-around only
        for part in parts:
            h = _mix(h + np.asarray(part).astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15))
    return h


def _uniform(*parts) -> np.ndarray:
    """Uniform in (0, 1), 53 bits, from the hash of `parts`."""
    return ((_hash(*parts) >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53


def _normal(*parts) -> np.ndarray:
    """Standard normal (Box-Muller) from two uniforms of `parts`."""
    u1, u2 = _uniform(*parts, 0), _uniform(*parts, 1)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


@dataclasses.dataclass(frozen=True)
class Batch:
    """One batch of samples.

    Attributes:
      features: {"dense": float32 [n, 13] counts, "categorical": int64 [n, 26] ids}.
      labels: float32 [n, 1] clicks (0 or 1).
      probabilities: float64 [n], the planted click probability of each sample.
    """

    features: dict
    labels: np.ndarray
    probabilities: np.ndarray


class CriteoLike:
    """The generator and its planted model.

    Args:
      vocab_sizes: 26 vocabulary sizes (ids of feature j are in [0, vocab_sizes[j])).
      seed: selects the planted model and the data.
      zipf_exponent: ids follow P(id = k) ~ (k + 1)^-zipf_exponent (a continuous power law,
        floored).

    >>> data = CriteoLike(vocabulary_sizes(1000), seed=0)
    >>> batch = data.batch(step=0, global_batch=8, rank=1, num_ranks=2)
    >>> batch.features["categorical"].shape, batch.labels.shape
    ((4, 26), (4, 1))
    """

    def __init__(self, vocab_sizes, seed: int = 0, zipf_exponent: float = 1.1):
        if len(vocab_sizes) != NUM_CATEGORICAL:
            raise ValueError(f"need {NUM_CATEGORICAL} vocabulary sizes, got {len(vocab_sizes)}")
        self.vocab_sizes = np.asarray(vocab_sizes, np.int64)
        self.seed = seed
        self.zipf_exponent = zipf_exponent
        rng = np.random.default_rng(seed)
        # Dense counts are exp(mu + sigma * z), rounded down, as Criteo's heavy-tailed counts.
        self.dense_mu = rng.uniform(0.0, 4.0, NUM_DENSE)
        self.dense_sigma = rng.uniform(0.5, 1.5, NUM_DENSE)
        self.dense_weights = rng.normal(0.0, 0.3, NUM_DENSE)
        self.effect_scale = rng.uniform(0.2, 0.6, NUM_CATEGORICAL)
        # Latent-factor interactions between pairs of the smaller features: what the model's
        # dot interaction is for.
        self.pairs = [(0, 3), (1, 5), (2, 7), (4, 9)]
        self.pair_scale = 0.5
        self.bias = -1.2

    def batch(self, step: int, global_batch: int, rank: int = 0, num_ranks: int = 1) -> Batch:
        """This rank's share of the global training batch of `step`.

        Samples [step * global_batch + lo, step * global_batch + hi) with
        lo = rank * global_batch // num_ranks and hi = (rank + 1) * global_batch // num_ranks.
        """
        lo = rank * global_batch // num_ranks
        hi = (rank + 1) * global_batch // num_ranks
        return self.samples(step * global_batch + np.arange(lo, hi), "train")

    def samples(self, index: np.ndarray, split: str = "train") -> Batch:
        """The samples of the given indices of a split ("train" or "eval": disjoint streams)."""
        salt = self.seed * len(SPLITS) + SPLITS.index(split)
        index = np.asarray(index, np.int64)[:, np.newaxis]
        ids = self._categorical(salt, index)
        counts = self._dense(salt, index)
        logits = self.logits(counts, ids)
        probabilities = 1.0 / (1.0 + np.exp(-logits))
        labels = _uniform(salt, _LABEL, index[:, 0]) < probabilities
        return Batch(
            features={"dense": counts.astype(np.float32), "categorical": ids},
            labels=labels.astype(np.float32)[:, np.newaxis],
            probabilities=probabilities,
        )

    def _categorical(self, salt: int, index: np.ndarray) -> np.ndarray:
        # Inverse CDF of the continuous power law on [1, V + 1), shifted to ids [0, V).
        u = _uniform(salt, _CATEGORICAL, index, np.arange(NUM_CATEGORICAL))
        a = 1.0 - self.zipf_exponent
        top = (self.vocab_sizes + 1.0) ** a
        x = (1.0 + u * (top - 1.0)) ** (1.0 / a)
        return np.minimum(np.floor(x).astype(np.int64) - 1, self.vocab_sizes - 1)

    def _dense(self, salt: int, index: np.ndarray) -> np.ndarray:
        z = _normal(salt, _DENSE, index, np.arange(NUM_DENSE))
        return np.floor(np.exp(self.dense_mu + self.dense_sigma * z))

    def _effects(self, ids: np.ndarray) -> np.ndarray:
        """[n, 26] planted per-id effects: a fixed normal per (feature, id), weaker for rare ids."""
        feature = np.arange(NUM_CATEGORICAL)
        z = _normal(self.seed, _EFFECT, feature, ids)
        return self.effect_scale * z / np.sqrt(1.0 + ids / _HEAD)

    def _factors(self, feature: int, ids: np.ndarray) -> np.ndarray:
        """[n, _FACTOR_DIM] planted latent factors of one feature's ids."""
        return _normal(self.seed, _FACTOR, feature, ids[:, np.newaxis], np.arange(_FACTOR_DIM))

    def logits(self, counts: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """The planted logit [n] of dense counts [n, 13] and ids [n, 26] (observed values only,
        so a model can reach the oracle)."""
        dense = (np.log1p(counts) - self.dense_mu) / self.dense_sigma
        logit = self.bias + dense @ self.dense_weights + self._effects(ids).sum(axis=1)
        for a, b in self.pairs:
            dot = (self._factors(a, ids[:, a]) * self._factors(b, ids[:, b])).sum(axis=1)
            logit += self.pair_scale * dot / np.sqrt(_FACTOR_DIM)
        return logit
