"""The Keras model and data that the hash-feature workers train (Horovod and tf.distribute):
two hash-table features (one bounded) and a fixed-size one in one EmbeddingCollection, dense
inputs padded with -1 (what a strategy with several replicas accepts), seeded initializers so
that every run starts from the same weights."""

import keras
import numpy as np
import tensorflow as tf

import sok_lite as sok
from tests.common import seeded_head

STEPS, GLOBAL_BATCH, DIM, SLOTS, PAD = 3, 16, 4, 3, -1
ITEMS = 23
# Raw keys anywhere in the int64 range (PAD excluded).
KEYS = np.array([-(2**62), -(2**40) - 5, -7, 0, 3, 11, 2**31 + 1, 2**52, 2**62 + 9], np.int64)


def features() -> list:
    seeded = keras.initializers.RandomNormal
    return [
        sok.keras.FeatureSpec("user", output_dim=DIM, initializer=seeded(seed=3), pad_value=PAD),
        sok.keras.FeatureSpec(
            "device",
            output_dim=DIM,
            combiner="mean",
            initializer=seeded(seed=4),
            pad_value=PAD,
            capacity=1000,  # far from full: no eviction, which would depend on the rank count
        ),
        sok.keras.FeatureSpec(
            "item", ITEMS, DIM, combiner="sqrtn", initializer=seeded(seed=5), pad_value=PAD
        ),
    ]


def build_model() -> keras.Model:
    inputs = {f.name: keras.Input(shape=(SLOTS,), dtype="int64", name=f.name) for f in features()}
    out = sok.keras.EmbeddingCollection(features(), name="features")(inputs)
    h = keras.layers.Concatenate()([out[f.name] for f in features()])
    logits = seeded_head(h)
    return keras.Model(inputs, logits)


def global_batch(step: int):
    """(features, labels) of the global batch of `step`, the same for any rank count."""
    rng = np.random.default_rng(step)
    n = GLOBAL_BATCH
    batch = {
        "user": KEYS[rng.integers(0, len(KEYS), (n, SLOTS))],
        "device": KEYS[rng.integers(0, 4, (n, SLOTS))],
        "item": rng.integers(0, ITEMS, (n, SLOTS)),
    }
    for ids in batch.values():
        ids[rng.random((n, SLOTS)) < 0.3] = PAD
    return batch, rng.standard_normal([n, 1]).astype(np.float32)


def rank_batch(step: int, rank: int, num_ranks: int):
    features_, labels = global_batch(step)
    local = GLOBAL_BATCH // num_ranks
    share = slice(rank * local, (rank + 1) * local)
    return {k: v[share] for k, v in features_.items()}, labels[share]


def rank_dataset(rank: int, num_ranks: int) -> tf.data.Dataset:
    """`rank`'s share of each step's global batch, one element per step."""
    local = GLOBAL_BATCH // num_ranks
    signature = (
        {f.name: tf.TensorSpec([local, SLOTS], tf.int64) for f in features()},
        tf.TensorSpec([local, 1], tf.float32),
    )

    def generate():
        for step in range(STEPS):
            yield rank_batch(step, rank, num_ranks)

    return tf.data.Dataset.from_generator(generate, output_signature=signature)


def table_arrays(tables: dict, shards_and_ranks) -> dict:
    """{"<table>.keys@<rank>", "<table>.rows@<rank>"} for hash tables (rows with their Adam
    slots), {"<table>@<rank>"} for fixed-size ones, for each (rank, shard) of each table."""
    arrays = {}
    for name, table in tables.items():
        for rank, shard in shards_and_ranks(table):
            if isinstance(shard, sok.DynamicVariable):
                keys, rows = shard.export(with_slots=True)
                arrays[f"{name}.keys@{rank}"] = keys.numpy()
                arrays[f"{name}.rows@{rank}"] = rows.numpy()
            else:
                arrays[f"{name}@{rank}"] = shard.numpy()
    return arrays
