"""Logistic regression on sparse weighted features, read from libsvm-style `id:value` rows.

The data come from a planted sparse logistic model (seeded), so the best achievable AUC, that of
the planted model itself ("oracle"), is known. The weights are one [num_features, 1] sok_lite
table: `lookup_sparse` with `sp_weights` (the feature values) and combiner "sum" computes
sum_j w[id_j] * value_j per row, and Keras' Adagrad updates only the rows of the batch.

    python examples/sparse_linear.py --steps 400
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import sok_lite as sok  # noqa: E402


def planted_libsvm(rng, rows, num_features, ids_per_row, true_w, true_b):
    """libsvm lines "label id:value ..." and the planted logit of each line.

    Feature popularity follows a Zipf-like law; values are positive, as tf-idf or counts.
    """
    popularity = 1.0 / (np.arange(num_features) + 10.0) ** 1.1
    ids = rng.choice(num_features, size=[rows, ids_per_row], p=popularity / popularity.sum())
    values = rng.uniform(0.2, 1.5, size=[rows, ids_per_row])
    logits = (true_w[ids] * values).sum(axis=1) + true_b
    labels = rng.random(rows) < 1.0 / (1.0 + np.exp(-logits))
    lines = [
        f"{int(y)} " + " ".join(f"{i}:{v:.4f}" for i, v in zip(row_ids, row_values))
        for y, row_ids, row_values in zip(labels, ids, values)
    ]
    return lines, logits


def parse_libsvm(lines: tf.Tensor):
    """[n] libsvm lines -> labels [n], ids and values as [n, None] RaggedTensors."""
    label_and_rest = tf.strings.split(lines, maxsplit=1).to_tensor()  # [n, 2]
    labels = tf.strings.to_number(label_and_rest[:, 0], tf.float32)
    tokens = tf.strings.split(label_and_rest[:, 1])  # [n, None] of "id:value"
    pairs = tf.strings.split(tokens.flat_values, sep=":").to_tensor()  # [nnz, 2]
    ids = tokens.with_flat_values(tf.strings.to_number(pairs[:, 0], tf.int64))
    values = tokens.with_flat_values(tf.strings.to_number(pairs[:, 1], tf.float32))
    return labels, ids, values


def auc(labels, scores) -> float:
    metric = keras.metrics.AUC(num_thresholds=1000)
    metric.update_state(labels, scores)
    return float(metric.result())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=400, help="training steps")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--features", type=int, default=5_000, help="rows of the weight table")
    parser.add_argument("--train-rows", type=int, default=100_000)
    parser.add_argument("--test-rows", type=int, default=20_000)
    parser.add_argument("--ids-per-row", type=int, default=20)
    parser.add_argument("--active", type=float, default=0.2, help="share of non-zero weights")
    parser.add_argument("--learning-rate", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    sok.init()
    rng = np.random.default_rng(args.seed)
    active = rng.random(args.features) < args.active
    true_w = np.where(active, rng.normal(0.0, 1.0, args.features), 0.0)
    true_b = -0.5
    make = lambda n: planted_libsvm(  # noqa: E731
        rng, n, args.features, args.ids_per_row, true_w, true_b
    )
    train_lines, _ = make(args.train_rows)
    test_lines, test_logits = make(args.test_rows)

    weights = sok.Variable(shape=[args.features, 1], initializer="zeros", name="weights")
    bias = tf.Variable(0.0, name="bias")
    optimizer = keras.optimizers.Adagrad(args.learning_rate)

    def logits_of(ids, values):
        linear = sok.lookup_sparse(weights, ids, sp_weights=values, combiners="sum")
        return linear[:, 0] + bias

    @tf.function
    def train_step(lines):
        labels, ids, values = parse_libsvm(lines)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(
                tf.nn.sigmoid_cross_entropy_with_logits(labels, logits_of(ids, values))
            )
        grads = tape.gradient(loss, [weights, bias])
        optimizer.apply_gradients(zip(grads, [weights, bias]))
        return loss

    data = (
        tf.data.Dataset.from_tensor_slices(train_lines)
        .shuffle(len(train_lines), seed=args.seed)
        .repeat()
        .batch(args.batch)
        .take(args.steps)
    )
    with sok.OptimizerScope([weights]):  # Adagrad updates the table row-wise
        for step, lines in enumerate(data, start=1):
            loss = train_step(lines)
            if step % max(1, args.steps // 5) == 0 or step == args.steps:
                print(f"step {step:5d}  train log-loss {float(loss):.4f}")

    test_labels, test_ids, test_values = parse_libsvm(tf.constant(test_lines))
    scores = tf.sigmoid(logits_of(test_ids, test_values))
    oracle = tf.sigmoid(tf.constant(test_logits, tf.float32))
    print(f"test AUC {auc(test_labels, scores):.4f}  oracle AUC {auc(test_labels, oracle):.4f}")


if __name__ == "__main__":
    main()
