"""sok_lite.keras.Embedding / EmbeddingCollection against sok_lite.lookup_sparse, in models."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.keras import Embedding, EmbeddingCollection, FeatureSpec

ROWS, DIM, BATCH, MAX_IDS, PAD = 30, 5, 12, 4, -1
COMBINERS = ("sum", "mean", "sqrtn")


def random_id_lists(seed, rows=ROWS, batch=BATCH):
    """Python lists of ids per sample, some samples empty."""
    rng = np.random.default_rng(seed)
    return [list(rng.integers(0, rows, rng.integers(0, MAX_IDS + 1))) for _ in range(batch)]


def as_input(id_lists, kind):
    """The same ids as a ragged, sparse, padded dense (pad anywhere in a row) or dense input."""
    ragged = tf.ragged.constant(id_lists, dtype=tf.int64, ragged_rank=1)
    if kind == "ragged":
        return ragged
    if kind == "sparse":
        return ragged.to_sparse()
    if kind == "dense":  # every sample has MAX_IDS ids
        return tf.constant([(ids * MAX_IDS)[:MAX_IDS] or [0] * MAX_IDS for ids in id_lists])
    rng = np.random.default_rng(len(id_lists))
    rows = []
    for ids in id_lists:
        row = list(ids) + [PAD] * (MAX_IDS + 2 - len(ids))
        rows.append(list(rng.permutation(row)))  # padding in the middle too
    return tf.constant(rows, dtype=tf.int32)


def reference_ids(id_lists, kind):
    """What the layer must look up, built without the layer's input conversion."""
    if kind == "dense":
        id_lists = [(ids * MAX_IDS)[:MAX_IDS] or [0] * MAX_IDS for ids in id_lists]
    return tf.ragged.constant(id_lists, dtype=tf.int64, ragged_rank=1)


def output_weights(seed, dim=DIM):
    return tf.constant(np.random.default_rng(seed).standard_normal([BATCH, dim]), tf.float32)


def dense_grad(grad):
    return tf.convert_to_tensor(grad).numpy()


@pytest.mark.parametrize("kind", ["ragged", "sparse", "dense_padded", "dense"])
@pytest.mark.parametrize("combiner", COMBINERS)
def test_embedding_equals_lookup_sparse(combiner, kind):
    id_lists = random_id_lists(seed=COMBINERS.index(combiner))
    layer = Embedding(
        ROWS, DIM, combiner=combiner, pad_value=PAD if kind == "dense_padded" else None
    )
    layer.build()
    w = output_weights(1)
    with tf.GradientTape(persistent=True) as tape:
        out = layer(as_input(id_lists, kind))
        expected = sok.lookup_sparse(
            layer.embeddings, reference_ids(id_lists, kind), combiners=combiner
        )
        loss, expected_loss = tf.reduce_sum(out * w), tf.reduce_sum(expected * w)
    assert out.shape == (BATCH, DIM)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-6, atol=1e-7)
    grad = tape.gradient(loss, layer.embeddings)
    assert isinstance(grad, tf.IndexedSlices)
    np.testing.assert_allclose(
        dense_grad(grad),
        dense_grad(tape.gradient(expected_loss, layer.embeddings)),
        rtol=1e-6,
        atol=1e-7,
    )


def test_embedding_one_id_per_sample_and_hotness():
    layer = Embedding(ROWS, DIM, hotness=2)
    ids = tf.constant([3, 7, 7], tf.int64)
    layer.build()
    expected = tf.gather(layer.embeddings, ids)
    np.testing.assert_allclose(layer(ids).numpy(), expected.numpy(), rtol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="hotness|longer"):
        layer(tf.ragged.constant([[1, 2, 3]], dtype=tf.int64))


def test_embedding_rejects_bad_arguments():
    with pytest.raises(ValueError, match="combiner"):
        Embedding(ROWS, DIM, combiner="max")
    with pytest.raises(ValueError, match="mode"):
        Embedding(ROWS, DIM, mode="sharded")
    with pytest.raises(ValueError, match="integers"):
        Embedding(ROWS, DIM)(tf.constant([[1.0]]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="out of range"):
        Embedding(ROWS, DIM)(tf.constant([[ROWS]]))


FEATURES = [
    FeatureSpec("user", ROWS, DIM, combiner="sum"),
    FeatureSpec("item", 20, 3, combiner="mean", initializer="random_uniform"),
    # Shares the "item" table, with its own combiner and dense padded input.
    FeatureSpec("history", 20, 3, combiner="sqrtn", initializer="random_uniform", table="item"),
    {"name": "query", "input_dim": 9, "output_dim": DIM, "combiner": "mean", "pad_value": PAD},
]


def collection_inputs(seed):
    return {
        "user": as_input(random_id_lists(seed, ROWS), "ragged"),
        "item": as_input(random_id_lists(seed + 1, 20), "sparse"),
        "history": as_input(random_id_lists(seed + 2, 20), "ragged"),
        "query": as_input(random_id_lists(seed + 3, 9), "dense_padded"),
    }


def collection_reference(layer, seed):
    kinds = {"user": "ragged", "item": "sparse", "history": "ragged", "query": "dense_padded"}
    rows = {"user": ROWS, "item": 20, "history": 20, "query": 9}
    names = list(kinds)
    tables = [layer.tables[n] for n in ("user", "item", "item", "query")]
    ids = [reference_ids(random_id_lists(seed + i, rows[n]), kinds[n]) for i, n in enumerate(names)]
    outputs = sok.lookup_sparse(tables, ids, combiners=["sum", "mean", "sqrtn", "mean"])
    return dict(zip(names, outputs))


def test_collection_equals_lookup_sparse_with_a_shared_table():
    layer = EmbeddingCollection(FEATURES)
    inputs = collection_inputs(seed=5)
    layer.build()
    assert sorted(layer.tables) == ["item", "query", "user"]
    weights = {
        "user": output_weights(1),
        "item": output_weights(2, 3),
        "history": output_weights(3, 3),
        "query": output_weights(4),
    }
    with tf.GradientTape(persistent=True) as tape:
        out = layer(inputs)
        expected = collection_reference(layer, seed=5)
        loss = tf.add_n([tf.reduce_sum(out[n] * w) for n, w in weights.items()])
        expected_loss = tf.add_n([tf.reduce_sum(expected[n] * w) for n, w in weights.items()])
    assert sorted(out) == sorted(expected)
    for name in out:
        np.testing.assert_allclose(out[name].numpy(), expected[name].numpy(), rtol=1e-6, atol=1e-7)
    for table in layer.tables.values():
        np.testing.assert_allclose(
            dense_grad(tape.gradient(loss, table)),
            dense_grad(tape.gradient(expected_loss, table)),
            rtol=1e-6,
            atol=1e-7,
        )


def test_collection_list_input_follows_feature_order():
    layer = EmbeddingCollection(FEATURES)
    inputs = collection_inputs(seed=8)
    as_dict = layer(inputs)
    as_list = layer([inputs[f] for f in ("user", "item", "history", "query")])
    assert isinstance(as_list, list) and len(as_list) == 4
    for name, out in zip(("user", "item", "history", "query"), as_list):
        np.testing.assert_array_equal(out.numpy(), as_dict[name].numpy())


def test_collection_rejects_bad_specs_and_inputs():
    with pytest.raises(ValueError, match="duplicate feature names"):
        EmbeddingCollection([FeatureSpec("a", 3, 2), FeatureSpec("a", 3, 2)])
    with pytest.raises(ValueError, match="share table 'a'"):
        EmbeddingCollection([FeatureSpec("a", 3, 2), FeatureSpec("b", 4, 2, table="a")])
    layer = EmbeddingCollection([FeatureSpec("a", 3, 2), FeatureSpec("b", 3, 2)])
    with pytest.raises(ValueError, match=r"lack features \['b'\]"):
        layer({"a": tf.constant([[1]])})
    with pytest.raises(ValueError, match="1 inputs for 2 features"):
        layer([tf.constant([[1]])])


def test_config_round_trip():
    layer = Embedding(
        ROWS,
        DIM,
        combiner="mean",
        initializer=keras.initializers.TruncatedNormal(stddev=0.2, seed=3),
        hotness=4,
        pad_value=PAD,
        name="emb",
    )
    copy = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(copy) is Embedding and copy.get_config() == layer.get_config()
    x = as_input(random_id_lists(2), "dense_padded")
    layer.build()
    copy.build()
    copy.set_weights(layer.get_weights())
    np.testing.assert_array_equal(copy(x).numpy(), layer(x).numpy())

    collection = EmbeddingCollection(FEATURES, name="features")
    copy = EmbeddingCollection.from_config(collection.get_config())
    assert copy.get_config() == collection.get_config()
    assert copy.features == tuple(FeatureSpec.coerce(f) for f in FEATURES)


def functional_model():
    user = keras.Input(shape=(None,), dtype="int64", ragged=True, name="user")
    query = keras.Input(shape=(MAX_IDS + 2,), dtype="int32", name="query")
    item = keras.Input(shape=(None,), dtype="int64", sparse=True, name="item")
    history = keras.Input(shape=(None,), dtype="int64", ragged=True, name="history")
    features = EmbeddingCollection(FEATURES, name="features")(
        {"user": user, "item": item, "history": history, "query": query}
    )
    extra = Embedding(ROWS, DIM, combiner="mean", name="user_again")(user)
    h = keras.layers.Concatenate()([extra] + [features[n] for n in sorted(features)])
    out = keras.layers.Dense(1, name="head")(h)
    return keras.Model({"user": user, "item": item, "history": history, "query": query}, out)


class SubclassedModel(keras.Model):
    def __init__(self):
        super().__init__()
        self.features = EmbeddingCollection(FEATURES)
        self.extra = Embedding(ROWS, DIM, combiner="mean")
        self.head = keras.layers.Dense(1)

    def call(self, inputs):
        features = self.features(inputs)
        h = tf.concat([self.extra(inputs["user"])] + [features[n] for n in sorted(features)], 1)
        return self.head(h)


TABLE_PARAMS = ROWS * DIM + 20 * 3 + 9 * DIM + ROWS * DIM
HEAD_PARAMS = (DIM + DIM + 3 + 3 + DIM) + 1


@pytest.mark.parametrize("make_model", [functional_model, SubclassedModel])
def test_models_track_tables(make_model):
    model = make_model()
    out = model(collection_inputs(seed=1))
    assert out.shape == (BATCH, 1)
    tables, others = sok.filter_variables(model.trainable_variables)
    assert len(tables) == 4 and all(isinstance(t, sok.Variable) for t in tables)
    assert len(others) == 2
    assert model.count_params() == TABLE_PARAMS + HEAD_PARAMS
    lines = []
    model.summary(print_fn=lambda line, **kwargs: lines.append(line))
    assert f"Total params: {TABLE_PARAMS + HEAD_PARAMS:,}" in "\n".join(lines)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(collection_inputs(seed=2)))
    grads = tape.gradient(loss, model.trainable_variables)
    assert all(g is not None for g in grads)


def test_freezing_a_layer_removes_its_table_from_training():
    model = functional_model()
    model(collection_inputs(seed=1))
    model.get_layer("features").trainable = False
    tables, _ = sok.filter_variables(model.trainable_variables)
    assert [t.name for t in tables] == ["user_again/embeddings:0"]
    frozen = model.get_layer("features").tables["user"]
    assert any(v is frozen for v in model.non_trainable_variables)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(collection_inputs(seed=2)))
    assert tape.gradient(loss, frozen) is None
    model.get_layer("features").trainable = True
    assert len(sok.filter_variables(model.trainable_variables)[0]) == 4


@pytest.mark.parametrize("make_model", [functional_model, SubclassedModel])
def test_checkpoint_round_trip(make_model, tmp_path):
    model = make_model()
    inputs = collection_inputs(seed=3)
    expected = model(inputs).numpy()
    saved = [v.numpy() for v in model.weights]
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))

    for v in model.weights:
        v.assign(tf.zeros_like(v))
    tf.train.Checkpoint(model=model).restore(path).assert_consumed()
    for v, value in zip(model.weights, saved):
        np.testing.assert_array_equal(v.numpy(), value)

    fresh = make_model()  # other initial values (unseeded initializers)
    fresh(inputs)
    tf.train.Checkpoint(model=fresh).restore(path).assert_consumed()
    np.testing.assert_allclose(fresh(inputs).numpy(), expected, rtol=1e-6)


def test_keras_weights_file_round_trip(tmp_path):
    model = functional_model()
    inputs = collection_inputs(seed=4)
    expected = model(inputs).numpy()
    model.save_weights(str(tmp_path / "model.weights.h5"))
    fresh = functional_model()
    fresh.load_weights(str(tmp_path / "model.weights.h5"))
    np.testing.assert_allclose(fresh(inputs).numpy(), expected, rtol=1e-6)
