"""A wide & deep click model (Cheng et al., 2016) on sok_lite tables, trained with Keras fit.

Wide part: a [wide_features, 1] table looked up with the feature values as weights and combiner
"sum", i.e. a sparse linear model sum_j w[id_j] * value_j. Deep part: embeddings of the user
(raw 64-bit keys in a DynamicVariable), the item, its category and the device (3 raw ids from a
range of device_categories, in a DynamicVariable too), with the dense features, through an MLP.
All five tables are looked up in one fused `sok.lookup_sparse` call.
"""

import keras
import tensorflow as tf

import sok_lite as sok


def _one_id_per_sample(ids):
    """[batch] ids -> [batch, 1] RaggedTensor."""
    return tf.RaggedTensor.from_tensor(tf.reshape(ids, [-1, 1]))


class WideAndDeep(keras.Model):
    """From the features of examples/wide_deep/data.py to click logits [batch, 1].

    The tables are sok_lite variables, not Keras weights: `train_step` adds them to the
    variables it differentiates, and the optimizer given to compile() must be a
    sok.OptimizerWrapper (which updates them row-wise). Checkpoint them with sok.dump.

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
        # Raw 64-bit keys: no vocabulary, a row per key seen.
        self.users = sok.DynamicVariable(embedding_dim, name="user")
        self.items = sok.Variable(shape=[items, embedding_dim], name="item")
        # Small and hot: the whole table on rank 0 rather than spread row by row.
        self.categories = sok.Variable(
            shape=[categories, embedding_dim], mode="localized:0", name="category"
        )
        # Declared over device_categories ids, stores only those that occur.
        self.devices = sok.DynamicVariable(embedding_dim, capacity=device_categories, name="device")
        self.mlp = keras.Sequential(
            [keras.layers.Dense(u, activation="relu") for u in deep_units]
            + [keras.layers.Dense(1)],
            name="mlp",
        )
        # Built now, so that its weights exist before the first batch (to broadcast them).
        self.mlp.build((None, 4 * embedding_dim + dense_features))
        self.built = True

    @property
    def tables(self) -> list:
        return [self.wide, self.users, self.items, self.categories, self.devices]

    def call(self, features):
        wide, user, item, category, device = sok.lookup_sparse(
            self.tables,
            [
                tf.RaggedTensor.from_tensor(features["wide_ids"]),
                _one_id_per_sample(features["user"]),
                _one_id_per_sample(features["item"]),
                _one_id_per_sample(features["category"]),
                _one_id_per_sample(features["device"]),
            ],
            sp_weights=[tf.RaggedTensor.from_tensor(features["wide_values"])] + [None] * 4,
        )
        deep = self.mlp(tf.concat([user, item, category, device, features["dense"]], axis=1))
        return wide + deep

    def train_step(self, data):
        # Keras' own step differentiates `trainable_variables` only; the tables are added here.
        features, labels = data
        with tf.GradientTape() as tape:
            logits = self(features, training=True)
            loss = self.compute_loss(x=features, y=labels, y_pred=logits)
            scaled = self.optimizer.scale_loss(loss)
        variables = self.trainable_variables + self.tables
        gradients = tape.gradient(scaled, variables)
        self.optimizer.apply_gradients(zip(gradients, variables))
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(labels, logits)
        return {m.name: m.result() for m in self.metrics}
