"""Online learning end to end: a model trains on a stream of clicks while a copy of it, exported
once and served by a process without sok_lite (serve.py), takes the trainer's deltas and gets
better as it serves.

The model is logistic regression over hashed feature values: one hash table of 1-wide rows
(a weight per key, raw 64-bit keys), so that every parameter lives in the table and travels in
the deltas. The stream is synthetic: 6 features of Zipf(1.2) ids, labels drawn from a planted
logistic model, so the served AUC can be compared with the best achievable (the oracle's).

Usage: python examples/online/train.py [--steps 600] [--batch 512] [--delta-every 50]
  [--snapshot-every 5] [--dir DIR]

The trainer exports the untrained model, starts serve.py on it, writes a delta every
--delta-every steps (every --snapshot-every-th one a snapshot), and at the end checks that the
served model predicts what the trained one does.
"""

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import sok_lite as sok  # noqa: E402
from sok_lite.io import delta_updater  # noqa: E402

FEATURES = 6
VOCABULARY = 20_000


def planted_weight(keys: np.ndarray) -> np.ndarray:
    """The true weight of each key (a fixed function of the key)."""
    mixed = (keys * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
    return (mixed.astype(np.float64) / 2.0**24 - 0.5) * 3.0


def batch(rng: np.random.Generator, size: int):
    """(values [size * FEATURES] int64 keys, splits [size + 1], labels [size], oracle logits)."""
    ids = np.minimum(rng.zipf(1.2, size=(size, FEATURES)), VOCABULARY).astype(np.uint64)
    keys = (np.arange(FEATURES, dtype=np.uint64) << np.uint64(40)) + ids  # feature-crossed keys
    logits = planted_weight(keys).sum(axis=1) / np.sqrt(FEATURES)
    labels = (rng.random(size) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    splits = np.arange(0, size * FEATURES + 1, FEATURES, dtype=np.int64)
    return keys.reshape(-1).astype(np.int64), splits, labels, logits


def oracle_auc(labels: np.ndarray, logits: np.ndarray) -> float:
    positives, negatives = logits[labels > 0.5], logits[labels < 0.5]
    return float((positives[:, None] > negatives[None, :]).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--delta-every", type=int, default=50)
    parser.add_argument("--snapshot-every", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where the model and deltas go")
    args = parser.parse_args()
    root = pathlib.Path(args.dir or tempfile.mkdtemp(prefix="online_"))
    root.mkdir(parents=True, exist_ok=True)

    weights = sok.DynamicVariable(1, initializer="zeros", name="weights")
    optimizer = keras.optimizers.Adagrad(0.1)

    def predict(values, splits):
        keys = tf.RaggedTensor.from_row_splits(values, splits)
        return tf.sigmoid(sok.lookup_sparse(weights, keys, combiners="sum"))

    rng = np.random.default_rng(0)
    values, splits, labels, logits = batch(np.random.default_rng(1), 4000)
    eval_npz = root / "held_out.npz"
    np.savez(eval_npz, values=values, splits=splits, labels=labels)
    print(f"oracle AUC on the held-out set: {oracle_auc(labels, logits):.4f}")

    served = root / "served"
    spec = [tf.TensorSpec([None], tf.int64)] * 2
    sok.export_saved_model(predict, served, spec, [weights], updatable=True, model_id="clicks")
    shutil.copy(delta_updater.__file__, served / "delta_updater.py")  # serving needs only this
    writer = sok.DeltaWriter(
        root / "deltas",
        [weights],
        optimizer,
        model_id="clicks",
        every_n_steps=args.delta_every,
        snapshot_every=args.snapshot_every,
    )
    done = root / "done"
    served_scores = root / "served_scores.npy"
    server = subprocess.Popen(
        [sys.executable, str(pathlib.Path(__file__).with_name("serve.py")), str(served),
         str(root / "deltas"), str(eval_npz), str(done), str(served_scores)]
    )  # fmt: skip
    try:
        ready = pathlib.Path(f"{done}.ready")
        while not ready.exists():  # the server loads the model first
            if server.poll() is not None:
                raise SystemExit("serve.py failed")
            time.sleep(0.1)
        for step in range(1, args.steps + 1):
            keys, row_splits, y, _ = batch(rng, args.batch)
            with tf.GradientTape() as tape:
                p = predict(tf.constant(keys), tf.constant(row_splits))[:, 0]
                loss = keras.losses.binary_crossentropy(tf.constant(y), p)
            grads = tape.gradient(loss, [weights])
            with sok.OptimizerScope([weights]):
                optimizer.apply_gradients(zip(grads, [weights]))
            if writer.maybe_write() is not None:
                print(
                    f"trainer: step {step}, loss {float(loss):.4f}, wrote delta {writer.sequence}"
                )
        if int(optimizer.iterations) > writer.base_step:
            writer.write()
        done.touch()
        if server.wait(timeout=300) != 0:
            raise SystemExit("serve.py failed")
    finally:
        if server.poll() is None:
            server.kill()
    trained = predict(tf.constant(values), tf.constant(splits)).numpy().reshape(-1)
    gap = float(np.abs(np.load(served_scores) - trained).max())
    print(f"served against trained predictions: max |difference| {gap:.2e}")
    if gap > 1e-6:
        raise SystemExit("the served model does not predict what the trained one does")


if __name__ == "__main__":
    main()
