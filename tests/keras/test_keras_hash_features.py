"""Hash-table features (input_dim=None) in sok_lite.keras layers: lookups, fit, saving, serving."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from tape_reference import manual_training

import sok_lite as sok
import sok_lite.keras.layers as keras_layers
from sok_lite.keras import Embedding, EmbeddingCollection, FeatureSpec, OptimizerWrapper
from tests.checkpoint.test_serving import SERVE
from tests.common import rows_by_key, seeded_head

DIM, BATCH, STEPS, SLOTS, PAD = 4, 16, 5, 3, -1
# Raw 64-bit keys anywhere in the int64 range, negative ones included (PAD is not among them).
KEYS = np.array([-(2**63), -(2**40) - 5, -7, 0, 3, 2**31 + 1, 2**52, 2**63 - 1], np.int64)


def features():
    """A hash-table feature, a fixed-size one, and a second hash feature sharing the first's
    table (bounded, LFU) with its own combiner."""
    hashed = dict(
        capacity=1000, evict_policy="lfu", initializer=keras.initializers.RandomNormal(seed=3)
    )
    return [
        FeatureSpec("user", output_dim=DIM, pad_value=PAD, table="users", **hashed),
        FeatureSpec(
            "item", 20, DIM, combiner="mean", initializer=keras.initializers.RandomUniform(seed=4)
        ),
        FeatureSpec("friends", output_dim=DIM, combiner="sqrtn", table="users", **hashed),
    ]


def hashed_features_model():
    """Inputs: "user" dense [batch, SLOTS] keys padded with PAD, "item" ragged ids, "friends"
    ragged keys. Seeded initializers: two models start alike without get_weights."""
    inputs = {
        "user": keras.Input(shape=(SLOTS,), dtype="int64", name="user"),
        "item": keras.Input(shape=(None,), dtype="int64", ragged=True, name="item"),
        "friends": keras.Input(shape=(None,), dtype="int64", ragged=True, name="friends"),
    }
    out = EmbeddingCollection(features(), name="features")(inputs)
    h = keras.layers.Concatenate()([out["user"], out["item"], out["friends"]])
    logits = seeded_head(h)
    return keras.Model(inputs, logits)


def batch_inputs(rng, n=BATCH, keys=KEYS):
    user = keys[rng.integers(0, len(keys), (n, SLOTS))]
    user[rng.random((n, SLOTS)) < 0.3] = PAD
    item = [rng.integers(0, 20, rng.integers(1, 4)).tolist() for _ in range(n)]
    friends = [keys[rng.integers(0, len(keys), rng.integers(0, 3))].tolist() for _ in range(n)]
    return {
        "user": tf.constant(user),
        "item": tf.ragged.constant(item, dtype=tf.int64, ragged_rank=1),
        "friends": tf.ragged.constant(friends, dtype=tf.int64, ragged_rank=1, inner_shape=()),
    }


def dataset(seed, steps=STEPS):
    rng = np.random.default_rng(seed)
    batches = [batch_inputs(rng) for _ in range(steps)]
    labels = [rng.standard_normal([BATCH, 1]).astype(np.float32) for _ in range(steps)]
    return [(x, y) for x, y in zip(batches, labels)]


def fit(model, data):
    """model.fit on the batches, in order."""
    for x, y in data:
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False)


def assert_same_rows(a: dict, b: dict, **tolerance):
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], err_msg=f"key {key}", **tolerance)


def dense_weights(model):
    return [w.numpy() for w in sok.filter_variables(model.weights)[1]]


def compiled(model, lr=0.05):
    model.compile(optimizer=OptimizerWrapper(keras.optimizers.Adam(lr)), loss="mse")
    return model


# --- lookups -------------------------------------------------------------------------------


def test_mixed_tables_are_looked_up_in_one_call(monkeypatch):
    calls = []

    def counting_lookup(params, *args, **kwargs):
        calls.append([type(p).__name__ for p in params])
        return sok.lookup_sparse(params, *args, **kwargs)

    monkeypatch.setattr(keras_layers, "lookup_sparse", counting_lookup)
    layer = EmbeddingCollection(features())
    inputs = batch_inputs(np.random.default_rng(0))
    layer.build()
    tables = layer.tables
    assert isinstance(tables["users"], sok.DynamicVariable)
    assert isinstance(tables["item"], sok.Variable)
    assert tables["users"].capacity == 1000
    w = {
        n: tf.constant(np.random.default_rng(i).standard_normal([BATCH, DIM]), tf.float32)
        for i, n in enumerate(inputs)
    }
    with tf.GradientTape(persistent=True) as tape:
        out = layer(inputs)
        # The reference: pad_value drops PAD from the dense input; ragged keys pass unchanged.
        user = tf.ragged.boolean_mask(inputs["user"], inputs["user"] != PAD)
        expected = sok.lookup_sparse(
            [tables["users"], tables["item"], tables["users"]],
            [user, inputs["item"], inputs["friends"]],
            combiners=["sum", "mean", "sqrtn"],
        )
        expected = dict(zip(("user", "item", "friends"), expected))
        loss = tf.add_n([tf.reduce_sum(out[n] * w[n]) for n in w])
        expected_loss = tf.add_n([tf.reduce_sum(expected[n] * w[n]) for n in w])
    assert calls[0] == ["DynamicVariable", "Variable", "DynamicVariable"] and len(calls) == 1
    for name in out:
        np.testing.assert_allclose(out[name].numpy(), expected[name].numpy(), rtol=1e-6)
    grad, want = tape.gradient(loss, tables["users"]), tape.gradient(expected_loss, tables["users"])
    assert isinstance(grad, tf.IndexedSlices)
    np.testing.assert_allclose(
        tf.math.unsorted_segment_sum(grad.values, *_segments(grad.indices)).numpy(),
        tf.math.unsorted_segment_sum(want.values, *_segments(want.indices)).numpy(),
        rtol=1e-5,
        atol=1e-6,
    )
    stored = set(rows_by_key(tables["users"]))
    assert PAD not in stored and -7 in stored  # negative keys are keys; the pad value is not


def _segments(keys):
    """Segment ids of keys in sorted key order (a gradient's rows summed per key)."""
    unique = tf.sort(tf.unique(keys).y)
    return tf.searchsorted(unique, keys), tf.size(unique)


def test_embedding_layer_with_a_hash_table():
    layer = Embedding(output_dim=3, combiner="mean", min_count=2, key_dtype="int32", name="hashed")
    ids = tf.constant([[5, -9], [5, 5]], tf.int32)
    first = layer(ids)
    table = layer.embeddings
    assert isinstance(table, sok.DynamicVariable) and table.key_dtype == tf.int32
    assert int(table.size()) == 0  # min_count=2: the first lookup of a key stores nothing
    np.testing.assert_array_equal(layer(ids).numpy(), first.numpy())  # initializer's rows
    assert sorted(rows_by_key(table)) == [-9, 5]
    assert layer.get_config()["min_count"] == 2 and layer.input_dim is None


def test_hash_table_initializers_map_onto_dynamic_variable():
    layer = EmbeddingCollection(
        [
            FeatureSpec("ones", output_dim=2, initializer="ones"),
            FeatureSpec("sok_constant", output_dim=2, initializer="13"),
            FeatureSpec(
                "config",
                output_dim=2,
                initializer={"class_name": "Constant", "config": {"value": 0.5}},
            ),
            FeatureSpec(
                "uniform", output_dim=2, initializer=keras.initializers.RandomUniform(-1e-3, 1e-3)
            ),
        ]
    )
    out = layer([tf.constant([[2**40]], tf.int64)] * 4)
    np.testing.assert_array_equal(out[0].numpy(), [[1, 1]])
    np.testing.assert_array_equal(out[1].numpy(), [[13, 13]])
    np.testing.assert_array_equal(out[2].numpy(), [[0.5, 0.5]])
    assert np.all(np.abs(out[3].numpy()) <= 1e-3)


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            dict(input_dim=10, output_dim=4, capacity=100),
            r"capacity=100 only apply to a hash table",
        ),
        (
            dict(input_dim=10, output_dim=4, evict_policy="lfu", min_count=2),
            r"evict_policy='lfu', min_count=2 only",
        ),
        (dict(input_dim=10, output_dim=4, key_dtype="int32"), r"key_dtype='int32' only"),
        (dict(input_dim=0, output_dim=4), r"input_dim must be an int >= 1, or None"),
        (dict(input_dim=None), r"output_dim must be an int >= 1"),
        (dict(output_dim=4, capacity=0), r"capacity must be an int >= 1"),
        (dict(output_dim=4, evict_policy="fifo"), r"evict_policy must be one of"),
        (dict(output_dim=4, min_count=0), r"min_count must be an int >= 1"),
        (dict(output_dim=4, key_dtype="float32"), r"key_dtype must be one of"),
        (dict(output_dim=4, initializer="orthogonal"), r"a hash table computes .* cannot do"),
    ],
)
def test_bad_specs_name_the_feature(spec, message):
    with pytest.raises(ValueError, match=rf"feature 'clicks': {message}"):
        FeatureSpec("clicks", **spec)


def test_bad_arguments_name_the_layer_or_table():
    with pytest.raises(ValueError, match=r"feature 'emb': capacity=5 only apply"):
        Embedding(10, 4, capacity=5, name="emb")
    with pytest.raises(ValueError, match=r"share table 'a' but differ .*capacity"):
        EmbeddingCollection(
            [FeatureSpec("a", output_dim=2, capacity=10), FeatureSpec("b", output_dim=2, table="a")]
        )
    with pytest.raises(ValueError, match="share table 'a'"):
        EmbeddingCollection([FeatureSpec("a", output_dim=2), FeatureSpec("b", 5, 2, table="a")])


def test_config_round_trip():
    layer = Embedding(
        output_dim=DIM,
        initializer=keras.initializers.TruncatedNormal(stddev=0.2, seed=3),
        capacity=50,
        evict_policy="lfu",
        min_count=3,
        key_dtype=tf.int32,
        name="emb",
    )
    copy = keras.layers.deserialize(keras.layers.serialize(layer))
    assert copy.get_config() == layer.get_config() and copy.key_dtype == "int32"
    collection = EmbeddingCollection(features(), name="features")
    copy = EmbeddingCollection.from_config(json.loads(json.dumps(collection.get_config())))
    assert copy.get_config() == collection.get_config()
    copy.build()
    assert copy.tables["users"].capacity == 1000


# --- training --------------------------------------------------------------------------------


def test_fit_equals_a_gradient_tape_loop():
    fitted, manual = compiled(hashed_features_model()), hashed_features_model()
    data = dataset(seed=0)
    fit(fitted, data)
    manual_training(manual, keras.optimizers.Adam(0.05), data)

    a = fitted.get_layer("features").tables
    b = manual.get_layer("features").tables
    seen = set(rows_by_key(a["users"]))
    assert seen <= set(KEYS.tolist()) and len(seen) >= 6
    # fit and the loop sum the loss in different orders (see test_keras_fit.py): float32 round-off.
    tolerance = dict(rtol=1e-5, atol=1e-6)
    assert_same_rows(rows_by_key(a["users"], True), rows_by_key(b["users"], True), **tolerance)
    np.testing.assert_allclose(a["item"].numpy(), b["item"].numpy(), **tolerance)
    for got, want in zip(dense_weights(fitted), dense_weights(manual), strict=True):
        np.testing.assert_allclose(got, want, **tolerance)


def test_freezing_keeps_hash_rows_at_their_initial_values():
    model = compiled(hashed_features_model())
    layer = model.get_layer("features")
    layer.trainable = False
    table = layer.tables["users"]
    assert not any(v is table for v in model.trainable_variables)
    assert any(v is table for v in model.non_trainable_variables)
    data = dataset(seed=1, steps=2)
    initial = hashed_features_model()
    initial(data[0][0])
    initial(data[1][0])  # the same keys, looked up without training
    before = [w.copy() for w in dense_weights(model)]
    fit(model, data)
    assert_same_rows(rows_by_key(table), rows_by_key(initial.get_layer("features").tables["users"]))
    assert any(np.any(a != b) for a, b in zip(dense_weights(model), before))


# --- saving ----------------------------------------------------------------------------------


def trained_model():
    model = compiled(hashed_features_model())
    fit(model, dataset(seed=2))
    return model


def assert_resumes_alike(model, restored):
    """Same hash rows (values and Adam slots), then the same weights after more training."""
    users = lambda m: m.get_layer("features").tables["users"]  # noqa: E731
    assert_same_rows(rows_by_key(users(restored), True), rows_by_key(users(model), True), rtol=0)
    more = dataset(seed=3, steps=2)
    fit(model, more)
    fit(restored, more)
    assert_same_rows(rows_by_key(users(restored), True), rows_by_key(users(model), True), rtol=1e-6)
    for got, want in zip(dense_weights(restored), dense_weights(model), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_keras_file_round_trip_resumes_training(tmp_path):
    model = trained_model()
    model.save(str(tmp_path / "model.keras"))
    loaded = keras.models.load_model(str(tmp_path / "model.keras"))
    assert isinstance(loaded.get_layer("features").tables["users"], sok.DynamicVariable)
    assert loaded.optimizer.iterations.numpy() == STEPS
    assert_resumes_alike(model, loaded)


def test_weights_file_round_trip(tmp_path):
    model = trained_model()
    model.save_weights(str(tmp_path / "model.weights.h5"))
    fresh = hashed_features_model()
    fresh(dataset(seed=9, steps=1)[0][0])  # keys the file does not hold: dropped on load
    fresh.load_weights(str(tmp_path / "model.weights.h5"))
    table = lambda m: m.get_layer("features").tables["users"]  # noqa: E731
    assert_same_rows(rows_by_key(table(fresh)), rows_by_key(table(model)), rtol=0)
    x = dataset(seed=2, steps=1)[0][0]
    np.testing.assert_array_equal(fresh(x).numpy(), model(x).numpy())


def test_tf_train_checkpoint_round_trip(tmp_path):
    model = trained_model()
    path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).save(str(tmp_path / "c"))
    restored = compiled(hashed_features_model())
    fit(restored, dataset(seed=5, steps=1))  # builds the optimizer; other keys and values
    tf.train.Checkpoint(model=restored, optimizer=restored.optimizer).restore(path)
    assert_resumes_alike(model, restored)


def test_sok_dump_and_load(tmp_path):
    model = trained_model()
    tables = list(model.get_layer("features").tables.values())
    sok.dump(tmp_path / "ckpt", tables, model.optimizer)
    restored = compiled(hashed_features_model())
    fit(restored, dataset(seed=5, steps=1))
    restored_tables = list(restored.get_layer("features").tables.values())
    sok.load(tmp_path / "ckpt", restored_tables, restored.optimizer)
    for w, value in zip(
        sok.filter_variables(restored.weights)[1], dense_weights(model), strict=True
    ):
        w.assign(value)  # dense weights travel by other means (here: by hand)
    for v, value in zip(
        restored.optimizer.inner_optimizer.variables, model.optimizer.inner_optimizer.variables
    ):
        v.assign(value)
    assert_resumes_alike(model, restored)


def test_exported_saved_model_serves_unseen_keys_without_sok_lite(tmp_path):
    model = trained_model()
    tables, _ = sok.filter_variables(model.variables)

    def predict(user, item_values, item_splits, friend_values, friend_splits):
        return model(
            {
                "user": user,
                "item": tf.RaggedTensor.from_row_splits(item_values, item_splits),
                "friends": tf.RaggedTensor.from_row_splits(friend_values, friend_splits),
            }
        )

    spec = [tf.TensorSpec([None, SLOTS], tf.int64)] + [tf.TensorSpec([None], tf.int64)] * 4
    sok.export_saved_model(predict, tmp_path / "served", spec, tables=tables)
    # Half the keys were never seen in training.
    unseen = np.array([11, -(2**50), 2**62 + 9, -123456789], np.int64)
    x = batch_inputs(np.random.default_rng(7), keys=np.concatenate([KEYS, unseen]))
    args = {"user": x["user"], "item_values": x["item"].values}  # predict's parameters
    args |= {"item_splits": x["item"].row_splits, "friend_values": x["friends"].values}
    args |= {"friend_splits": x["friends"].row_splits}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-c", SERVE, str(tmp_path / "served")],
        input=json.dumps({name: a.numpy().tolist() for name, a in args.items()}),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    served = np.array(json.loads(proc.stdout.strip().splitlines()[-1]))
    before = set(rows_by_key(tables[0]))
    expected = predict(**args).numpy()  # the training model creates the unseen keys' rows
    assert set(rows_by_key(tables[0])) - before, "the batch must hold keys training never saw"
    np.testing.assert_allclose(served, expected, rtol=1e-5, atol=1e-6)


# --- counting and get_weights ------------------------------------------------------------------


def test_count_params_counts_the_stored_rows():
    layer = EmbeddingCollection(features(), name="features")
    layer.build()
    item_values = 20 * DIM
    assert layer.count_params() == item_values  # no key stored yet
    layer(batch_inputs(np.random.default_rng(0)))
    rows = int(layer.tables["users"].size())
    assert rows > 0 and layer.count_params() == rows * DIM + item_values
    layer(batch_inputs(np.random.default_rng(1), keys=KEYS + 1))  # new keys: the count grows
    more = int(layer.tables["users"].size())
    assert more > rows and layer.count_params() == more * DIM + item_values
    embedding = Embedding(output_dim=DIM)
    embedding(tf.constant([[5, 6, 5]], tf.int64))
    assert embedding.count_params() == 2 * DIM


def summary_text(model) -> str:
    lines = []
    model.summary(print_fn=lambda line, **kwargs: lines.append(line))
    return "\n".join(lines)


def test_model_count_params_and_summary_count_the_stored_rows():
    model = hashed_features_model()
    table = model.get_layer("features").tables["users"]
    others = sum(int(np.prod(w.shape)) for w in sok.filter_variables(model.weights)[1])
    others += 20 * DIM  # the fixed-size table
    assert model.count_params() == others  # no key stored yet
    assert f"Total params: {others:,} ({others * 4:,}.00 B)" in summary_text(model)
    model(batch_inputs(np.random.default_rng(0)))
    total = others + int(table.size()) * DIM
    assert total > others and model.count_params() == total
    assert f"Trainable params: {total:,}" in summary_text(model)
    fit(compiled(model), dataset(seed=1, steps=1))  # optimizer variables are listed too
    assert "Optimizer params" in summary_text(model)


@pytest.mark.parametrize(
    "make_optimizer",
    # Made per test: an optimizer built on the tables would keep them alive for the session.
    [lambda: "adam", lambda: keras.optimizers.SGD(0.1, momentum=0.9), keras.optimizers.Adagrad],
    ids=["adam", "momentum", "adagrad"],
)
def test_a_plain_keras_optimizer_is_refused_naming_the_table_and_the_wrapper(make_optimizer):
    model = hashed_features_model()
    model.compile(optimizer=make_optimizer(), loss="mse")
    table = model.get_layer("features").tables["users"]
    before = rows_by_key(table)
    with pytest.raises(ValueError, match=r"'users', a hash table.*sok\.OptimizerWrapper\("):
        fit(model, dataset(seed=0, steps=1))
    assert rows_by_key(table).keys() == before.keys()


def test_collection_features_of_different_batch_sizes_are_refused():
    layer = EmbeddingCollection(features(), name="features")
    inputs = batch_inputs(np.random.default_rng(0))
    inputs["item"] = inputs["item"][:-1]
    match = rf"users\D*{BATCH}\b.*item\D*{BATCH - 1}\b"
    with pytest.raises(ValueError, match=match):
        layer(inputs)
    ragged = tf.RaggedTensorSpec([None, None], tf.int64, 1)
    signature = {"user": tf.TensorSpec([None, SLOTS], tf.int64), "item": ragged, "friends": ragged}
    call = tf.function(layer.__call__, input_signature=[signature])  # batch sizes unknown
    with pytest.raises(tf.errors.InvalidArgumentError, match=match):
        call(inputs)
    assert int(layer.tables["users"].size()) == 0


def test_get_weights_of_hash_tables_say_what_to_use_instead():
    model = hashed_features_model()
    model(batch_inputs(np.random.default_rng(0)))
    layer = model.get_layer("features")
    for call in (layer.get_weights, lambda: layer.set_weights([])):
        with pytest.raises(ValueError, match=r"layer 'features': .*hash tables \[.*users.*save_w"):
            call()
    with pytest.raises(ValueError, match=r"no dense value.*save_weights\(\).*sok\.dump"):
        model.get_weights()
    # Without hash tables the layers keep Keras' contract.
    fixed = Embedding(5, 2)
    fixed(tf.constant([[1]]))
    fixed.set_weights([np.ones([5, 2], np.float32)])
    np.testing.assert_array_equal(fixed.get_weights()[0], np.ones([5, 2]))
