"""export_saved_model: the SavedModel serves in a process where sok_lite cannot be imported, with
the training model's predictions, never-seen hash-table keys included; its inputs are named
after the function's parameters, and a model that would still need sok_lite is refused."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.io.serving_init import initial_rows
from sok_lite.tables.initializers import RowInitializer

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
inputs = json.loads(sys.stdin.read())  # {input name: values}
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
args = {name: tf.constant(v, tf.int64) for name, v in inputs.items()}
print(json.dumps(list(serve(**args).values())[0].numpy().tolist()))
"""


def serve_without_sok_lite(path, inputs):
    """The first output of the SavedModel at `path` for `inputs` ({input name: values}),
    computed in a process without sok_lite."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-c", SERVE, str(path)],
        input=json.dumps(inputs),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return np.array(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_saved_model_serves_without_sok_lite(model, tmp_path):
    predict, tables = model
    path = tmp_path / "served"
    sok.export_saved_model(predict, path, SPEC, tables=tables)
    # Keys from a wider space than training saw: most of them were never stored.
    batch = make_batch(np.random.default_rng(42), key_space=10**6)
    before = int(tables[2].size())
    expected = predict(*batch).numpy()  # the training model (this inserts the new keys)
    assert int(tables[2].size()) > before, "the test batch must contain unseen keys"
    names = ["uv", "us", "iv", "is_", "kv", "ks"]  # predict's parameters
    served = serve_without_sok_lite(path, {n: t.numpy().tolist() for n, t in zip(names, batch)})
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


def lookup_fn(table, nested=False):
    """predict(values, splits): the sum of `table`'s rows per sample; with `nested`, the lookup
    runs in a tf.function of its own (a function of the traced graph's library)."""

    def lookup(values, splits):
        ids = tf.RaggedTensor.from_row_splits(values, splits)
        return sok.lookup_sparse(table, ids, combiners="sum")

    inner = tf.function(lookup) if nested else lookup

    def predict(values, splits):
        return inner(values, splits) * 2.0

    return predict


SPLIT_SPEC = [tf.TensorSpec([None], tf.int64)] * 2


@pytest.mark.parametrize("how", ["own_call", "nested", "one_call"])
def test_export_refuses_a_table_missing_from_tables(how, tmp_path):
    listed = sok.Variable(shape=[5, 2], name="listed_rows")
    missing = sok.DynamicVariable(2, name="missing_clicks")
    inner = lookup_fn(missing, nested=how == "nested")

    def predict(values, splits):
        ids = tf.RaggedTensor.from_row_splits(values, splits)
        if how == "one_call":
            return tf.add_n(sok.lookup_sparse([listed, missing], [ids, ids]))
        return sok.lookup_sparse(listed, ids) + inner(values, splits)

    path = tmp_path / "served"
    with pytest.raises(ValueError, match=r"op SokLite\w+ .*'missing_clicks'") as refused:
        sok.export_saved_model(predict, path, SPLIT_SPEC, tables=[listed])
    assert "listed_rows" not in str(refused.value)
    assert not path.exists()


def test_an_empty_hash_table_serves_initial_rows(tmp_path):
    init = keras.initializers.RandomUniform(-1.0, 1.0, seed=3)
    table = sok.DynamicVariable(4, initializer=init, name="empty")
    predict = lookup_fn(table)
    assert int(table.size()) == 0
    sok.export_saved_model(predict, tmp_path / "served", SPLIT_SPEC, tables=[table])
    values, splits = [7, -(2**40), 7, 12], [0, 3, 3, 4]
    inputs = {"values": values, "splits": splits}
    served = serve_without_sok_lite(tmp_path / "served", inputs)
    # After the export: the training lookup creates the rows the served model computed.
    expected = predict(tf.constant(values, tf.int64), tf.constant(splits, tf.int64)).numpy()
    np.testing.assert_allclose(served, expected, rtol=1e-6, atol=1e-7)


def test_signature_inputs_are_named_after_the_function(tmp_path):
    table = sok.Variable(shape=[6, 3], initializer="random_uniform")
    named = [tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.int64, name="lengths")]
    exports = {
        "params": (lookup_fn(table), SPLIT_SPEC, {"values", "splits"}),
        "spec_name_wins": (lookup_fn(table), named, {"values", "lengths"}),
        "varargs": (lambda *a: lookup_fn(table)(*a), SPLIT_SPEC, {"args_0", "args_1"}),
    }
    for case, (fn, spec, names) in exports.items():
        sok.export_saved_model(fn, tmp_path / case, spec, tables=[table])
        serve = tf.saved_model.load(str(tmp_path / case)).signatures["serving_default"]
        assert set(serve.structured_input_signature[1]) == names, case


def test_a_keras_model_names_its_input_after_the_feature(tmp_path):
    ids = keras.Input(shape=(3,), dtype="int64", name="query")
    embedding = sok.keras.Embedding(10, 2, combiner="sum")
    model = keras.Model(ids, keras.layers.Dense(1)(embedding(ids)))
    x = tf.constant([[1, 4, 9], [0, 0, 2]], tf.int64)
    expected = model(x).numpy()
    spec = [tf.TensorSpec([None, 3], tf.int64)]
    sok.export_saved_model(model, tmp_path / "served", spec)
    served = serve_without_sok_lite(tmp_path / "served", {"query": x.numpy().tolist()})
    np.testing.assert_allclose(served, expected, rtol=1e-6, atol=1e-7)
