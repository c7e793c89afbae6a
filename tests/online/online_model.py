"""A small model for the online-learning tests: a static table and a hash table (of one
dtype) under a seeded dense head, its training step, and its export with updatable tables."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import keras
import numpy as np
import tensorflow as tf

import sok_lite as sok
from sok_lite.io import delta_updater

SPEC = [tf.TensorSpec([None], tf.int64)] * 4
INPUTS = ["user_values", "user_splits", "click_values", "click_splits"]
USERS = 20


class OnlineModel:
    """Tables `users` (static, [USERS, 4]) and `clicks` (hash, dim 3), both of `dtype`, and a
    dense head; predict() returns the two embeddings and the score."""

    def __init__(self, dtype=tf.float32, **hash_args):
        self.users = sok.Variable(
            shape=[USERS, 4], initializer="random_uniform", dtype=dtype, name="users"
        )
        self.clicks = sok.DynamicVariable(
            3, initializer="random_normal", dtype=dtype, name="clicks", **hash_args
        )
        self.tables = [self.users, self.clicks]
        self.head = keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(3))
        self.head.build((None, 7))
        self.optimizer = keras.optimizers.Adam(0.05)

    def predict(self, user_values, user_splits, click_values, click_splits):
        ids = [
            tf.RaggedTensor.from_row_splits(user_values, user_splits),
            tf.RaggedTensor.from_row_splits(click_values, click_splits),
        ]
        users, clicks = sok.lookup_sparse(self.tables, ids, combiners="sum")
        score = self.head(tf.concat([users, clicks], axis=1))
        return {"users": users, "clicks": clicks, "score": score}

    def train(self, steps, seed, key_space=30):
        """`steps` Adam steps on random batches (keys in [0, key_space))."""
        rng = np.random.default_rng(seed)
        for _ in range(steps):
            batch = random_batch(rng, key_space)
            with tf.GradientTape() as tape:
                out = self.predict(*batch)
                loss = tf.reduce_sum((out["score"] - 1.0) ** 2)
            grads = tape.gradient(loss, self.tables)
            with sok.OptimizerScope(self.tables):
                self.optimizer.apply_gradients(zip(grads, self.tables))

    def export(self, path, model_id="ctr", sequence=0):
        sok.export_saved_model(
            self.predict,
            path,
            SPEC,
            tables=self.tables,
            updatable=True,
            model_id=model_id,
            sequence=sequence,
            step=int(self.optimizer.iterations),
        )

    def writer(self, directory, model_id="ctr", **kwargs):
        return sok.DeltaWriter(directory, self.tables, self.optimizer, model_id, **kwargs)


def random_batch(rng, key_space, size=8):
    """(user values, splits, click values, splits) of `size` samples of 0 to 3 ids each."""

    def ragged(high, low=0):
        rows = [rng.integers(low, high, size=k) for k in rng.integers(0, 4, size=size)]
        splits = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
        values = np.concatenate(rows + [np.zeros([0], np.int64)]).astype(np.int64)
        return tf.constant(values), tf.constant(splits)

    return (*ragged(USERS), *ragged(key_space, low=-key_space))


def one_id_batch(keys):
    """A batch with one sample per user row and per hash key in `keys`: each sample's
    embedding is that row (sum of one), so served rows compare exactly."""
    n = max(USERS, len(keys))
    users = np.arange(n) % USERS
    clicks = np.resize(np.asarray(keys, np.int64), n)
    splits = np.arange(n + 1, dtype=np.int64)
    return (
        tf.constant(users, tf.int64),
        tf.constant(splits),
        tf.constant(clicks, tf.int64),
        tf.constant(splits),
    )


def serve(model, batch):
    """The served outputs ({name: array}) of a loaded model for a batch."""
    out = model.signatures["serving_default"](**dict(zip(INPUTS, batch)))
    return {k: v.numpy() for k, v in out.items()}


def expected(model, batch):
    """What the training model gives for a batch ({name: array})."""
    return {k: v.numpy() for k, v in model.predict(*batch).items()}


def assert_served_equal(served, wanted):
    """Rows exactly, the score within float32 rounding of the dense head."""
    np.testing.assert_array_equal(served["users"], wanted["users"])
    np.testing.assert_array_equal(served["clicks"], wanted["clicks"])
    np.testing.assert_allclose(served["score"], wanted["score"], rtol=1e-5, atol=1e-6)


# Run in a process where importing sok_lite fails: the updater module is a copy, imported by
# its file name; prints the applied sequence numbers, the status and the served outputs.
SERVE_WITH_UPDATES = """
import json, sys
sys.modules["sok_lite"] = None
sys.path.insert(0, sys.argv[3])
import numpy as np, tensorflow as tf
import delta_updater
model = tf.saved_model.load(sys.argv[1])
updater = delta_updater.DeltaUpdater(model, sys.argv[2])
applied = updater.poll()
status = updater.status()
outputs = []
for inputs in json.loads(sys.stdin.read()):
    args = {k: tf.constant(v, tf.int64) for k, v in inputs.items()}
    out = model.signatures["serving_default"](**args)
    outputs.append({k: v.numpy().astype(np.float64).tolist() for k, v in out.items()})
print(json.dumps({"applied": applied, "status": status, "outputs": outputs}))
"""


def serve_in_plain_tf(model_dir, delta_dir, batches, tmp_path):
    """Copies delta_updater.py to a folder of its own, then, in a process that cannot import
    sok_lite, loads the model, applies the deltas and serves each of `batches`."""
    folder = pathlib.Path(tmp_path) / "updater"
    folder.mkdir()
    shutil.copy(delta_updater.__file__, folder / "delta_updater.py")
    inputs = [{name: t.numpy().tolist() for name, t in zip(INPUTS, b)} for b in batches]
    result = run_plain_tf(SERVE_WITH_UPDATES, [model_dir, delta_dir, folder], inputs)
    result["outputs"] = [{k: np.array(v) for k, v in out.items()} for out in result["outputs"]]
    return result


def run_plain_tf(script, args, payload):
    """Runs `script` (python -c, with `args`) on `payload` as JSON on stdin; returns the JSON
    of its last output line. The scripts make importing sok_lite fail first."""
    proc = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
