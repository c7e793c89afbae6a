"""Synthetic click logs for the wide & deep example, from a planted logistic model (seeded).

Each sample has:
- `wide_ids`, `wide_values`: 8 weighted sparse features (crossed features or terms with tf-idf
  weights, say), ids in [0, wide_features): the wide part's input;
- `user`: a raw 64-bit key, the hash of the user's name, anywhere in the int64 range;
- `item`: an id in [0, items) and `category`: that item's category in [0, categories);
- `device`: one of 3 raw ids drawn once from [0, device_categories);
- `dense`: 3 standard-normal numeric features.

The label is drawn from a logistic model planted over exactly these features, so the best
achievable AUC is that of the planted probabilities (the "oracle" AUC).

The global batch of step s comes from a generator seeded with (seed, s): it is the same on any
number of ranks, and each rank keeps its own share of it.
"""

import dataclasses
import hashlib

import numpy as np

WIDE_IDS_PER_SAMPLE = 8
NUM_DENSE = 3
NUM_DEVICES = 3
_FACTOR_DIM = 4  # width of the planted user x category interaction
_HEAD = 50.0  # ids ranked beyond ~_HEAD carry weaker effects (rare ids regress to the mean)
_TRAIN, _EVAL = 0, 1  # generator streams


def hashed_keys(prefix: str, count: int) -> np.ndarray:
    """int64 [count]: the 64-bit hashes of the names "<prefix>-0", "<prefix>-1", ...

    What a pipeline does with string ids: any int64 value can come out, negative ones too.
    """
    digests = b"".join(
        hashlib.blake2b(f"{prefix}-{k}".encode(), digest_size=8).digest() for k in range(count)
    )
    return np.frombuffer(digests, dtype="<i8").astype(np.int64)


def _power_law(rng: np.random.Generator, size: int, vocabulary: int, exponent: float):
    """Ids in [0, vocabulary) with P(id = k) ~ (k + 1)^-exponent (continuous law, floored)."""
    a = 1.0 - exponent
    top = (vocabulary + 1.0) ** a
    x = (1.0 + rng.random(size) * (top - 1.0)) ** (1.0 / a)
    return np.minimum(np.floor(x).astype(np.int64) - 1, vocabulary - 1)


def _shrink(rank: np.ndarray) -> np.ndarray:
    return 1.0 / np.sqrt(1.0 + rank / _HEAD)


@dataclasses.dataclass(frozen=True)
class Batch:
    """Samples: `features` (dict of arrays, [n, ...]), `labels` float32 [n, 1] (0 or 1), and
    `probabilities` float64 [n], the planted click probability of each sample."""

    features: dict
    labels: np.ndarray
    probabilities: np.ndarray


class ClickLogs:
    """The generator and its planted model.

    Args:
      wide_features: rows of the wide part's weight table.
      users: the number of distinct users (each a hashed 64-bit key).
      items: rows of the item table; categories: rows of the category table.
      device_categories: the range the 3 device ids are drawn from.
      seed: selects the planted model and the data.

    >>> logs = ClickLogs(wide_features=100, users=1000, items=50, categories=5)
    >>> batch = logs.batch(step=0, global_batch=8, rank=1, num_ranks=2)
    >>> batch.features["wide_ids"].shape, batch.features["user"].dtype, batch.labels.shape
    ((4, 8), dtype('int64'), (4, 1))
    """

    def __init__(
        self,
        wide_features: int = 20_000,
        users: int = 200_000,
        items: int = 20_000,
        categories: int = 50,
        device_categories: int = 100_000,
        seed: int = 0,
    ):
        self.wide_features, self.users, self.items = wide_features, users, items
        self.seed = seed
        rng = np.random.default_rng([seed, 1234])
        self.user_keys = hashed_keys(f"user-{seed}", users)
        self.item_category = rng.integers(0, categories, items)
        self.device_ids = rng.choice(device_categories, NUM_DEVICES, replace=False)
        self.device_share = np.array([0.6, 0.3, 0.1])
        # The planted model: a sparse linear part over the wide features ...
        active = rng.random(wide_features) < 0.3
        self.wide_weights = np.where(active, rng.normal(0.0, 0.7, wide_features), 0.0)
        # ... per-id effects, weaker for rare users and items ...
        self.user_effects = 0.6 * rng.normal(size=users) * _shrink(np.arange(users))
        self.item_effects = 0.5 * rng.normal(size=items) * _shrink(np.arange(items))
        self.device_effects = np.array([0.0, 0.4, -0.5])
        self.dense_weights = rng.normal(0.0, 0.4, NUM_DENSE)
        # ... and an interaction of user and category factors: what the deep part is for.
        user_scale = _shrink(np.arange(users))[:, np.newaxis]
        self.user_factors = rng.normal(size=(users, _FACTOR_DIM)) * user_scale
        self.category_factors = rng.normal(size=(categories, _FACTOR_DIM))
        self.bias = -1.0

    def batch(self, step: int, global_batch: int, rank: int = 0, num_ranks: int = 1) -> Batch:
        """This rank's share, samples [lo, hi) with lo = rank * global_batch // num_ranks and
        hi = (rank + 1) * global_batch // num_ranks, of the global training batch of `step`."""
        rng = np.random.default_rng([self.seed, _TRAIN, step])
        lo = rank * global_batch // num_ranks
        hi = (rank + 1) * global_batch // num_ranks
        return self._draw(rng, global_batch, slice(lo, hi))

    def held_out(self, samples: int, rank: int = 0, num_ranks: int = 1) -> Batch:
        """This rank's share of `samples` held-out samples (a stream apart from training)."""
        rng = np.random.default_rng([self.seed, _EVAL])
        share = samples // num_ranks
        return self._draw(rng, samples, slice(rank * share, (rank + 1) * share))

    def training_user_keys(self, steps: int, global_batch: int) -> np.ndarray:
        """The distinct user keys of the first `steps` global training batches."""
        keys = [self.batch(s, global_batch).features["user"] for s in range(steps)]
        return np.unique(np.concatenate(keys))

    def _draw(self, rng: np.random.Generator, n: int, share: slice) -> Batch:
        # The whole global batch is drawn, then sliced: the same samples for any rank count.
        wide_ids = _power_law(rng, n * WIDE_IDS_PER_SAMPLE, self.wide_features, 1.05)
        wide_ids = wide_ids.reshape(n, WIDE_IDS_PER_SAMPLE)
        wide_values = rng.uniform(0.2, 1.5, wide_ids.shape)
        user = _power_law(rng, n, self.users, 1.05)
        item = _power_law(rng, n, self.items, 1.1)
        device = rng.choice(NUM_DEVICES, n, p=self.device_share)
        dense = rng.normal(size=(n, NUM_DENSE))
        category = self.item_category[item]
        logits = (
            self.bias
            + (self.wide_weights[wide_ids] * wide_values).sum(axis=1)
            + self.user_effects[user]
            + self.item_effects[item]
            + self.device_effects[device]
            + dense @ self.dense_weights
            + (self.user_factors[user] * self.category_factors[category]).sum(axis=1)
        )
        probabilities = 1.0 / (1.0 + np.exp(-logits))
        labels = rng.random(n) < probabilities
        features = {
            "wide_ids": wide_ids,
            "wide_values": wide_values.astype(np.float32),
            "user": self.user_keys[user],
            "item": item,
            "category": category,
            "device": self.device_ids[device].astype(np.int64),
            "dense": dense.astype(np.float32),
        }
        return Batch(
            features={k: v[share] for k, v in features.items()},
            labels=labels[share].astype(np.float32)[:, np.newaxis],
            probabilities=probabilities[share],
        )
