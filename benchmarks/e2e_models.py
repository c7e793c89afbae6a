"""The models and data of benchmarks/e2e_bench.py: a DLRM in four variants, of two shapes.

13 dense inputs and `features` categorical features of one id each (plus, optionally, a ragged
multi-hot feature), d = 16. A bottom MLP on the dense inputs ends in 16 units; its output and
the embeddings are concatenated into a top MLP and a logit. The shapes (ARCHITECTURES):

- criteo-dlrm: Criteo-like cardinalities (29M rows at scale 1.0), bottom 64-16, top 128,
  Adam 1e-3, batch 4,096.
- deeprec-dlrm: DeepRec's modelzoo DLRM at its defaults (modelzoo/dlrm/train.py): every
  feature hashed into 10,000 buckets, bottom 512-256-64-16 with batch normalization after each
  layer, the embeddings concatenated with the bottom output (its default "cat" interaction),
  top 512-256, Adam 0.01, batch 512.

- plain_keras: one keras.layers.Embedding per feature (Keras applies Adam to whole tables).
- sok_lite_static: one sok.keras.EmbeddingCollection of fixed-size tables.
- sok_lite_dynamic: the same collection with hash tables (input_dim=None).
- floor: the same inputs and dense layers, the embeddings replaced by Dense(16) on the dense
  inputs: what a step costs without any table.
"""

import dataclasses

import keras
import numpy as np
import tensorflow as tf

import sok_lite as sok

NUM_DENSE = 13
DIM = 16
# Criteo-like cardinalities of the 26 features at scale 1.0 (29.01M rows in all).
CARDINALITIES = [10_000_000] * 2 + [5_000_000] + [1_000_000] * 3 + [100_000] * 10 + [1_000] * 10
MODELS = ("plain_keras", "sok_lite_static", "sok_lite_dynamic", "floor")
MULTI_HOT = "multi_hot"


@dataclasses.dataclass(frozen=True)
class Architecture:
    """The tables and dense layers of one workload."""

    rows: tuple[int, ...]  # rows per feature at scale 1.0, cycled to the features asked for
    bottom: tuple[int, ...]  # Dense + ReLU layers on the dense inputs; the last has DIM units
    top: tuple[int, ...]  # Dense + ReLU layers before the logit
    batch_norm: bool  # BatchNormalization after each bottom layer
    learning_rate: float
    batch: int  # the batch a run takes unless told otherwise


ARCHITECTURES = {
    "criteo-dlrm": Architecture(tuple(CARDINALITIES), (64, DIM), (128,), False, 1e-3, 4096),
    "deeprec-dlrm": Architecture((10_000,), (512, 256, 64, DIM), (512, 256), True, 1e-2, 512),
}


def cardinalities(features: int, scale: float, arch: str = "criteo-dlrm") -> list[int]:
    """Rows per feature: the architecture's list cycled to `features` entries, times `scale`."""
    rows = ARCHITECTURES[arch].rows
    return [max(2, int(rows[i % len(rows)] * scale)) for i in range(features)]


def batches(cards, batch, count, multi_hot, seed=0) -> list[dict]:
    """`count` batches of ({name: ids or dense}, labels), ids Zipf(1.1) modulo the rows.

    The multi-hot feature (when multi_hot > 0) has 1..multi_hot ids per sample, padded with -1
    into a dense [batch, multi_hot] tensor, over a table as big as the first feature's.
    """
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        x = {"numeric": rng.standard_normal([batch, NUM_DENSE]).astype(np.float32)}
        for i, rows in enumerate(cards):
            x[f"c{i}"] = ((rng.zipf(1.1, batch) - 1) % rows).astype(np.int64).reshape(batch, 1)
        if multi_hot:
            ids = (rng.zipf(1.1, [batch, multi_hot]) - 1) % cards[0]
            lengths = rng.integers(1, multi_hot + 1, batch)
            ids[np.arange(multi_hot)[None, :] >= lengths[:, None]] = -1
            x[MULTI_HOT] = ids.astype(np.int64)
        y = (x["numeric"][:, :1] + rng.standard_normal([batch, 1]) > 0).astype(np.float32)
        out.append((x, y))
    return out


def _inputs(cards, multi_hot, ragged) -> dict:
    inputs = {"numeric": keras.Input((NUM_DENSE,), name="numeric")}
    for i in range(len(cards)):
        inputs[f"c{i}"] = keras.Input((1,), dtype="int64", name=f"c{i}")
    if multi_hot:
        shape = (None,) if ragged else (multi_hot,)
        inputs[MULTI_HOT] = keras.Input(shape, dtype="int64", ragged=ragged, name=MULTI_HOT)
    return inputs


def ragged_multi_hot(kind: str, multi_hot: int, ragged_input: bool) -> bool:
    """Whether model `kind` reads the multi-hot feature as a RaggedTensor: sok_lite layers take
    ragged ids as they come; Keras' Embedding needs them padded."""
    return bool(multi_hot) and ragged_input and kind.startswith("sok_lite")


class _PaddedMean(keras.layers.Layer):
    """Mean of the embeddings of a [batch, k] id tensor padded with -1 (plain Keras)."""

    def __init__(self, rows, **kwargs):
        super().__init__(**kwargs)
        self.embedding = keras.layers.Embedding(rows, DIM)

    def call(self, ids):
        valid = keras.ops.cast(ids >= 0, "float32")[..., None]
        rows = self.embedding(keras.ops.maximum(ids, 0)) * valid
        return keras.ops.sum(rows, axis=1) / keras.ops.maximum(keras.ops.sum(valid, axis=1), 1.0)


def _embeddings(kind, inputs, cards, multi_hot) -> list:
    names = [f"c{i}" for i in range(len(cards))]
    if kind == "floor":
        return [keras.layers.Dense(DIM, name=f"e{n}")(inputs["numeric"]) for n in names]
    if kind == "plain_keras":
        outs = [
            keras.layers.Flatten()(keras.layers.Embedding(rows, DIM, name=f"e{n}")(inputs[n]))
            for n, rows in zip(names, cards)
        ]
        if multi_hot:
            outs.append(_PaddedMean(cards[0], name="emulti")(inputs[MULTI_HOT]))
        return outs
    dynamic = kind == "sok_lite_dynamic"
    specs = [
        sok.keras.FeatureSpec(n, None if dynamic else rows, DIM) for n, rows in zip(names, cards)
    ]
    if multi_hot:
        specs.append(
            sok.keras.FeatureSpec(
                MULTI_HOT, None if dynamic else cards[0], DIM, combiner="mean", pad_value=-1
            )
        )
    out = sok.keras.EmbeddingCollection(specs, name="tables")(
        {s.name: inputs[s.name] for s in specs}
    )
    return [out[s.name] for s in specs]


def build_model(
    kind: str, cards, multi_hot: int = 0, ragged: bool = False, arch: str = "criteo-dlrm"
) -> keras.Model:
    """The compiled model `kind` (one of MODELS) of architecture `arch`: Adam, binary
    cross-entropy. Under a mixed-precision policy the logit stays float32.

    ragged: the multi-hot feature is a ragged input (else dense, padded with -1).
    """
    shape = ARCHITECTURES[arch]
    inputs = _inputs(cards, multi_hot, ragged)
    dense = inputs["numeric"]
    for units in shape.bottom:
        dense = keras.layers.Dense(units, activation="relu")(dense)
        if shape.batch_norm:
            dense = keras.layers.BatchNormalization()(dense)
    h = keras.layers.Concatenate()([dense] + _embeddings(kind, inputs, cards, multi_hot))
    for units in shape.top:
        h = keras.layers.Dense(units, activation="relu")(h)
    model = keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(h))
    optimizer = keras.optimizers.Adam(shape.learning_rate)
    if kind.startswith("sok_lite"):
        optimizer = sok.keras.OptimizerWrapper(optimizer)
    model.compile(optimizer=optimizer, loss=keras.losses.BinaryCrossentropy(from_logits=True))
    return model


def dataset(data, ragged: bool = False) -> tf.data.Dataset:
    """The batches, repeated forever, prefetched; ragged: the multi-hot feature as a
    RaggedTensor without its padding."""
    xs = {k: np.stack([x[k] for x, _ in data]) for k in data[0][0]}
    ys = np.stack([y for _, y in data])
    ds = tf.data.Dataset.from_tensor_slices((xs, ys))
    if ragged:

        def unpad(x, y):
            x = dict(x)
            x[MULTI_HOT] = tf.RaggedTensor.from_tensor(x[MULTI_HOT], padding=-1)
            return x, y

        ds = ds.map(unpad)
    return ds.repeat().prefetch(tf.data.AUTOTUNE)
