"""export_saved_model: the SavedModel serves in a process where sok_lite cannot be imported, with
the training model's predictions, never-seen hash-table keys included."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.initializers import RowInitializer
from sok_lite.serving_init import initial_rows

SPEC = [tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.int64)] * 3


@pytest.fixture
def model():
    tables = [
        sok.Variable(shape=[30, 4], initializer=keras.initializers.RandomNormal(seed=1)),
        sok.Variable(shape=[7, 2], initializer="random_uniform", mode="localized:0"),
        sok.DynamicVariable(3, initializer=keras.initializers.TruncatedNormal(seed=5)),
    ]
    head = keras.layers.Dense(1)
    head.build((None, 9))

    def predict(uv, us, iv, is_, kv, ks):
        ids = [tf.RaggedTensor.from_row_splits(v, s) for v, s in ((uv, us), (iv, is_), (kv, ks))]
        outs = sok.lookup_sparse(tables, ids, combiners=["sum", "mean", "sqrtn"])
        return head(tf.concat(outs, axis=1))

    opt, dense_opt = keras.optimizers.Adam(0.05), keras.optimizers.SGD(0.1)
    rng = np.random.default_rng(0)
    for _ in range(5):
        batch = make_batch(rng, key_space=20)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(predict(*batch) ** 2)
        grads = tape.gradient(loss, tables + head.trainable_variables)
        with sok.OptimizerScope(tables):
            opt.apply_gradients(zip(grads[:3], tables))
        dense_opt.apply_gradients(zip(grads[3:], head.trainable_variables))
    return predict, tables


def make_batch(rng, key_space):
    def ragged(high, low=0, size=6):
        rows = [rng.integers(low, high, size=k) for k in rng.integers(0, 4, size=size)]
        splits = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
        values = np.concatenate(rows + [np.zeros([0], np.int64)]).astype(np.int64)
        return tf.constant(values), tf.constant(splits)

    return (*ragged(30), *ragged(7), *ragged(key_space, low=-key_space))


SERVE = """
import json, sys
sys.modules["sok_lite"] = None  # importing sok_lite would fail: the model must not need it
import numpy as np, tensorflow as tf
inputs = json.loads(sys.stdin.read())
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
args = {f"args_{i}": tf.constant(v, tf.int64) for i, v in enumerate(inputs)}
print(json.dumps(list(serve(**args).values())[0].numpy().tolist()))
"""


def test_saved_model_serves_without_sok_lite(model, tmp_path):
    predict, tables = model
    path = tmp_path / "served"
    sok.export_saved_model(predict, path, SPEC, tables=tables)
    # Keys from a wider space than training saw: most of them were never stored.
    batch = make_batch(np.random.default_rng(42), key_space=10**6)
    before = int(tables[2].size())
    expected = predict(*batch).numpy()  # the training model (this inserts the new keys)
    assert int(tables[2].size()) > before, "the test batch must contain unseen keys"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-c", SERVE, str(path)],
        input=json.dumps([t.numpy().tolist() for t in batch]),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    served = np.array(json.loads(proc.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-6)
    graph_ops = set()
    loaded = tf.saved_model.load(str(path))
    for f in loaded.signatures.values():
        graph_ops |= {op.type for op in f.graph.get_operations()}
    assert not [op for op in graph_ops if op.startswith("SokLite")]


@pytest.mark.parametrize(
    "init",
    [
        RowInitializer("random_normal", 0.1, 0.3, seed=7),
        RowInitializer("truncated_normal", 0.0, 1.0, seed=2**40),
        RowInitializer("random_uniform", -2.0, 0.7, seed=0),
        RowInitializer("constant", 1.5),
    ],
)
def test_plain_tf_initializer_equals_the_kernel(init):
    keys = tf.constant([-(2**63), -1, 0, 1, 2**31, 2**63 - 1] + list(range(100, 400)), tf.int64)
    kernel = init(keys, 16, tf.float32).numpy()
    plain = initial_rows(init, keys, 16).numpy()
    np.testing.assert_allclose(plain, kernel, rtol=1e-6, atol=1e-7)
