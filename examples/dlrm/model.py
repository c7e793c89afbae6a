"""A DLRM-style click model: bottom MLP, one embedding per categorical feature, dot interaction,
top MLP (Naumov et al., 2019), with the 26 tables in one sok_lite EmbeddingCollection."""

import keras
import numpy as np
from data import NUM_CATEGORICAL, NUM_DENSE

import sok_lite as sok


@keras.saving.register_keras_serializable(package="dlrm_example")
class DotInteraction(keras.layers.Layer):
    """Dot products of every pair of feature vectors.

    Call args:
      vectors: a list of F tensors [batch, d].

    Returns:
      [batch, F * (F - 1) / 2]: <v_i, v_j> for i > j, row-major over the lower triangle.
    """

    def call(self, vectors):
        stacked = keras.ops.stack(vectors, axis=1)  # [batch, F, d]
        gram = keras.ops.matmul(stacked, keras.ops.transpose(stacked, (0, 2, 1)))  # [b, F, F]
        f = len(vectors)
        rows, cols = np.tril_indices(f, k=-1)
        flat = keras.ops.reshape(gram, (-1, f * f))
        return keras.ops.take(flat, rows * f + cols, axis=1)


def _mlp(x, units, name):
    for i, u in enumerate(units):
        x = keras.layers.Dense(u, activation="relu", name=f"{name}_{i}")(x)
    return x


def build_dlrm(
    vocab_sizes,
    embedding_dim: int = 16,
    bottom_units=(64, 32),
    top_units=(128, 64),
    table_dtype: str = "float32",
) -> keras.Model:
    """The model, from {"dense": [batch, 13] counts, "categorical": [batch, 26] ids} to logits.

    Args:
      vocab_sizes: rows of each of the 26 tables.
      embedding_dim: the width of every table and of the bottom MLP's output.
      bottom_units: hidden layers of the bottom MLP (before its embedding_dim output).
      top_units: hidden layers of the top MLP (before its single logit).
      table_dtype: the tables' storage dtype (float32, bfloat16 or float16).

    Returns:
      A functional keras.Model; output [batch, 1] click logits.
    """
    dense_in = keras.Input((NUM_DENSE,), name="dense")
    ids_in = keras.Input((NUM_CATEGORICAL,), dtype="int64", name="categorical")

    # Counts are heavy-tailed: the model sees log(1 + count).
    bottom = _mlp(keras.ops.log1p(dense_in), bottom_units, "bottom")
    bottom = keras.layers.Dense(embedding_dim, activation="relu", name="bottom_out")(bottom)

    features = [
        sok.keras.FeatureSpec(
            f"C{j + 1}",
            input_dim=v,
            output_dim=embedding_dim,
            hotness=1,
            storage_dtype=table_dtype,
        )
        for j, v in enumerate(vocab_sizes)
    ]
    # One fused lookup for all 26 tables; each column is one id per sample.
    embedded = sok.keras.EmbeddingCollection(features, name="embeddings")(
        [ids_in[:, j] for j in range(NUM_CATEGORICAL)]
    )

    interactions = DotInteraction(name="interaction")([bottom, *embedded])
    top = _mlp(keras.layers.Concatenate()([bottom, interactions]), top_units, "top")
    logits = keras.layers.Dense(1, name="logit")(top)
    return keras.Model({"dense": dense_in, "categorical": ids_in}, logits, name="dlrm")
