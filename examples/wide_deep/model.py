"""A wide & deep click model (Cheng et al., 2016) on sok_lite tables, trained with Keras fit.

Deep part: a `sok.keras.EmbeddingCollection` of four features, looked up in one fused call: the
user (raw 64-bit keys, a hash-table feature), the item, its category and the device (3 raw ids
from a range of device_categories, a bounded hash-table feature), then the dense features,
through an MLP. Wide part: a [wide_features, 1] table looked up with the feature values as
weights and combiner "sum", i.e. a sparse linear model sum_j w[id_j] * value_j; the Keras layers
take no per-id weights, so the model holds this table itself and looks it up with
`sok.lookup_sparse`.
"""

import keras
import tensorflow as tf

import sok_lite as sok
from sok_lite.keras import EmbeddingCollection, FeatureSpec


class WideAndDeep(keras.Model):
    """From the features of examples/wide_deep/data.py to click logits [batch, 1].

    The deep part's tables are the Keras weights of its EmbeddingCollection. The wide table is
    a sok_lite variable of the model, not a Keras weight: `train_step` adds it to the variables
    it differentiates. The optimizer given to compile() must be a sok.OptimizerWrapper (which
    updates the tables row-wise). Checkpoint the tables with sok.dump.

    Args:
      wide_features: rows of the wide table.
      items, categories: rows of the item and category tables.
      device_categories: the most rows the device table may hold (its capacity).
      embedding_dim: the width of the deep part's tables.
      dense_features: the number of dense features.
      deep_units: hidden layers of the MLP (before its single logit).
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
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.wide = sok.Variable(shape=[wide_features, 1], initializer="zeros", name="wide")
        self.embeddings = EmbeddingCollection(
            [
                # Raw 64-bit keys: no vocabulary, a row per key seen.
                FeatureSpec("user", output_dim=embedding_dim),
                FeatureSpec("item", items, embedding_dim),
                # Small and hot: the whole table on rank 0 rather than spread row by row.
                FeatureSpec("category", categories, embedding_dim, mode="localized:0"),
                # Declared over device_categories ids, stores only those that occur.
                FeatureSpec("device", output_dim=embedding_dim, capacity=device_categories),
            ],
            name="embeddings",
        )
        self.mlp = keras.Sequential(
            [keras.layers.Dense(u, activation="relu") for u in deep_units]
            + [keras.layers.Dense(1)],
            name="mlp",
        )
        # Built now, so that its weights exist before the first batch (to broadcast them).
        self.mlp.build((None, 4 * embedding_dim + dense_features))
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
        deep = self.embeddings(features)  # keys that are not features are ignored
        wide = sok.lookup_sparse(
            self.wide,
            tf.RaggedTensor.from_tensor(features["wide_ids"]),
            sp_weights=tf.RaggedTensor.from_tensor(features["wide_values"]),
        )
        embedded = [deep[name] for name in ("user", "item", "category", "device")]
        return wide + self.mlp(tf.concat(embedded + [features["dense"]], axis=1))

    def train_step(self, data):
        # Keras' own step differentiates `trainable_variables` only; the wide table is added.
        features, labels = data
        with tf.GradientTape() as tape:
            logits = self(features, training=True)
            loss = self.compute_loss(x=features, y=labels, y_pred=logits)
            scaled = self.optimizer.scale_loss(loss)
        variables = self.trainable_variables + [self.wide]
        gradients = tape.gradient(scaled, variables)
        self.optimizer.apply_gradients(zip(gradients, variables))
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(labels, logits)
        return {m.name: m.result() for m in self.metrics}
