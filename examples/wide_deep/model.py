"""A wide & deep click model (Cheng et al., 2016) on sok_lite tables, trained with Keras fit.

One `sok.keras.EmbeddingCollection` holds every table and looks all of them up in one fused
call. Deep part: the user (raw 64-bit keys, a hash-table feature), the item, its category and
the device (3 raw ids from a range of device_categories, a bounded hash-table feature), then the
dense features, through an MLP. Wide part: a weighted feature over a [wide_features, 1] table,
its ids weighted by the feature values with combiner "sum", i.e. a sparse linear model
sum_j w[id_j] * value_j.
"""

import keras
import tensorflow as tf

import sok_lite as sok
from sok_lite.keras import EmbeddingCollection, FeatureSpec

DEEP_FEATURES = ("user", "item", "category", "device")


class WideAndDeep(keras.Model):
    """From the features of examples/wide_deep/data.py to click logits [batch, 1].

    Every table is a Keras weight of the EmbeddingCollection, so Keras' own fit trains them
    all; the optimizer given to compile() must be a sok.keras.OptimizerWrapper (which updates
    the tables row-wise). Checkpoint the tables with sok.dump.

    Args:
      wide_features: rows of the wide table.
      items, categories: rows of the item and category tables.
      device_categories: the most rows the device table may hold (its capacity).
      embedding_dim: the width of the deep part's tables.
      dense_features: the number of dense features.
      deep_units: hidden layers of the MLP (before its single logit).
      table_dtype: the storage dtype of every table (float32, bfloat16 or float16).
    """

    def __init__(
        self,
        wide_features: int,
        items: int,
        categories: int,
        device_categories: int,
        embedding_dim: int = 16,
        dense_features: int = 3,
        deep_units=(64, 32),
        table_dtype: str = "float32",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.embeddings = EmbeddingCollection(
            [
                # Raw 64-bit keys: no vocabulary, a row per key seen.
                FeatureSpec("user", output_dim=embedding_dim, storage_dtype=table_dtype),
                FeatureSpec("item", items, embedding_dim, storage_dtype=table_dtype),
                # Small and hot: the whole table on rank 0 rather than spread row by row.
                FeatureSpec(
                    "category",
                    categories,
                    embedding_dim,
                    mode="localized:0",
                    storage_dtype=table_dtype,
                ),
                # Declared over device_categories ids, stores only those that occur.
                FeatureSpec(
                    "device",
                    output_dim=embedding_dim,
                    capacity=device_categories,
                    storage_dtype=table_dtype,
                ),
                # The wide part: one weight per id, times the id's value, summed per sample.
                FeatureSpec(
                    "wide_ids",
                    wide_features,
                    1,
                    initializer="zeros",
                    table="wide",
                    weight_feature="wide_values",
                    storage_dtype=table_dtype,
                ),
            ],
            name="embeddings",
        )
        self.mlp = keras.Sequential(
            [keras.layers.Dense(u, activation="relu") for u in deep_units]
            + [keras.layers.Dense(1)],
            name="mlp",
        )
        # Built now, so that its weights exist before the first batch (to broadcast them).
        self.mlp.build((None, len(DEEP_FEATURES) * embedding_dim + dense_features))
        self.built = True

    @property
    def users(self) -> sok.DynamicVariable:
        """The user table (a hash table), once the model has run."""
        return self.embeddings.tables["user"]

    @property
    def devices(self) -> sok.DynamicVariable:
        """The device table (a bounded hash table), once the model has run."""
        return self.embeddings.tables["device"]

    def call(self, features):
        looked_up = self.embeddings(features)  # keys that are not features are ignored
        deep = [looked_up[name] for name in DEEP_FEATURES] + [features["dense"]]
        return looked_up["wide_ids"] + self.mlp(tf.concat(deep, axis=1))
