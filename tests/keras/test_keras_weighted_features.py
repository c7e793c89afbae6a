"""Weighted features (FeatureSpec.weight_feature, Embedding(weighted=True)) in sok_lite.keras
layers, against sok_lite.lookup_sparse with sp_weights."""

import dataclasses
import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from tape_reference import manual_training

import sok_lite as sok
import sok_lite.keras.layers as keras_layers
from sok_lite.keras import Embedding, EmbeddingCollection, FeatureSpec, OptimizerWrapper
from tests.common import rows_by_key, seeded_head

ROWS, DIM, BATCH, MAX_IDS, PAD, STEPS = 30, 4, 12, 4, -1, 4
COMBINERS = ("sum", "mean", "sqrtn")
KINDS = ("ragged", "sparse", "dense_padded", "dense")


def random_samples(seed, rows=ROWS, batch=BATCH):
    """Per sample, a list of (id, weight) pairs; some samples empty, ids repeat."""
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(batch):
        n = rng.integers(0, MAX_IDS + 1)
        ids = rng.integers(0, rows, n).tolist()
        samples.append(list(zip(ids, rng.uniform(0.1, 2.0, n).tolist())))
    return samples


def as_inputs(samples, kind):
    """(ids, weights) of the samples as the layer takes them: ragged, sparse, dense with PAD
    anywhere in a row (weights there: garbage the layer must drop), or dense with MAX_IDS ids
    per sample."""
    if kind == "dense":
        samples = [(s * MAX_IDS)[:MAX_IDS] or [(0, 1.0)] * MAX_IDS for s in samples]
    if kind == "dense_padded":
        rng = np.random.default_rng(len(samples))
        rows = []
        for s in samples:
            row = s + [(PAD, 99.0)] * (MAX_IDS + 2 - len(s))
            rows.append([row[i] for i in rng.permutation(len(row))])
        return (
            tf.constant([[i for i, _ in r] for r in rows], tf.int64),
            tf.constant([[w for _, w in r] for r in rows], tf.float32),
        )
    ids = tf.ragged.constant([[i for i, _ in s] for s in samples], tf.int64, ragged_rank=1)
    weights = tf.ragged.constant([[w for _, w in s] for s in samples], tf.float32, ragged_rank=1)
    if kind == "sparse":
        return ids.to_sparse(), weights.to_sparse()
    if kind == "dense":
        return ids.to_tensor(), weights.to_tensor()
    return ids, weights


def reference(samples, kind):
    """The (ids, weights) lookup_sparse must see, built without the layer's conversion."""
    if kind == "dense":
        samples = [(s * MAX_IDS)[:MAX_IDS] or [(0, 1.0)] * MAX_IDS for s in samples]
    ids = tf.ragged.constant([[i for i, _ in s] for s in samples], tf.int64, ragged_rank=1)
    weights = tf.ragged.constant([[w for _, w in s] for s in samples], tf.float32, ragged_rank=1)
    return ids, weights


def output_weights(seed, dim=DIM):
    return tf.constant(np.random.default_rng(seed).standard_normal([BATCH, dim]), tf.float32)


def summed_rows(grad):
    """A table gradient as one row per id, summed (dense tables and hash tables alike)."""
    keys, segments = tf.unique(grad.indices)
    rows = tf.math.unsorted_segment_sum(grad.values, segments, tf.size(keys))
    return dict(zip(keys.numpy().tolist(), rows.numpy()))


def assert_same_gradient(got, want):
    assert isinstance(got, tf.IndexedSlices)
    got, want = summed_rows(got), summed_rows(want)
    assert sorted(got) == sorted(want)
    for key in got:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("combiner", COMBINERS)
def test_weighted_embedding_equals_lookup_sparse_with_weights(combiner, kind):
    samples = random_samples(seed=COMBINERS.index(combiner))
    layer = Embedding(
        ROWS,
        DIM,
        combiner=combiner,
        pad_value=PAD if kind == "dense_padded" else None,
        weighted=True,
    )
    layer.build()
    ids, weights = as_inputs(samples, kind)
    ref_ids, ref_weights = reference(samples, kind)
    w = output_weights(1)
    composite = isinstance(weights, (tf.RaggedTensor, tf.SparseTensor))
    weight_values = weights.values if composite else weights
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(weight_values)
        out = layer((ids, weights))
        expected = sok.lookup_sparse(
            layer.embeddings, ref_ids, sp_weights=ref_weights, combiners=combiner
        )
        loss, expected_loss = tf.reduce_sum(out * w), tf.reduce_sum(expected * w)
    assert out.shape == (BATCH, DIM)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-6, atol=1e-6)
    assert_same_gradient(
        tape.gradient(loss, layer.embeddings), tape.gradient(expected_loss, layer.embeddings)
    )
    # The weights get no gradient, as with lookup_sparse.
    assert tape.gradient(loss, weight_values) is None


FEATURES = [
    # Weighted, ragged, on a fixed-size table.
    FeatureSpec("terms", ROWS, DIM, weight_feature="term_weights"),
    # Unweighted and sharing that table.
    FeatureSpec("title", ROWS, DIM, combiner="mean", table="terms"),
    # Weighted hash-table feature, dense ids padded with PAD.
    FeatureSpec(
        "user",
        output_dim=DIM,
        combiner="sqrtn",
        pad_value=PAD,
        weight_feature="user_weights",
        initializer=keras.initializers.RandomNormal(seed=5),
    ),
    # Weighted and sparse, on its own table.
    FeatureSpec("cross", 10, 2, combiner="mean", weight_feature="cross_weights"),
]
KEYS = np.array([-(2**40), -3, 7, 2**50], np.int64)


def collection_inputs(seed):
    rng = np.random.default_rng(seed)
    terms, term_weights = as_inputs(random_samples(seed), "ragged")
    title = as_inputs(random_samples(seed + 1), "ragged")[0]
    user_samples = [[(int(KEYS[i % 4]), w) for i, w in s] for s in random_samples(seed + 2)]
    user, user_weights = as_inputs(user_samples, "dense_padded")
    cross, cross_weights = as_inputs(random_samples(seed + 3, rows=10), "sparse")
    inputs = {"terms": terms, "term_weights": term_weights, "title": title, "user": user}
    inputs.update(user_weights=user_weights, cross=cross, cross_weights=cross_weights)
    inputs["unused"] = tf.constant(rng.standard_normal([BATCH, 2]), tf.float32)
    return inputs


def collection_reference(layer, inputs):
    user = tf.ragged.boolean_mask(inputs["user"], inputs["user"] != PAD)
    user_weights = tf.ragged.boolean_mask(inputs["user_weights"], inputs["user"] != PAD)
    tables = layer.tables
    outputs = sok.lookup_sparse(
        [tables["terms"], tables["terms"], tables["user"], tables["cross"]],
        [inputs["terms"], inputs["title"], user, inputs["cross"]],
        sp_weights=[inputs["term_weights"], None, user_weights, inputs["cross_weights"]],
        combiners=["sum", "mean", "sqrtn", "mean"],
    )
    return dict(zip(("terms", "title", "user", "cross"), outputs))


def test_collection_mixes_weighted_unweighted_and_hash_features_in_one_call(monkeypatch):
    calls = []

    def counting_lookup(params, *args, **kwargs):
        calls.append(len(params))
        return sok.lookup_sparse(params, *args, **kwargs)

    monkeypatch.setattr(keras_layers, "lookup_sparse", counting_lookup)
    layer = EmbeddingCollection(FEATURES)
    layer.build()
    inputs = collection_inputs(seed=3)
    w = {f.name: output_weights(i, f.output_dim) for i, f in enumerate(FEATURES)}
    with tf.GradientTape(persistent=True) as tape:
        out = layer(inputs)
        expected = collection_reference(layer, inputs)
        loss = tf.add_n([tf.reduce_sum(out[n] * w[n]) for n in w])
        expected_loss = tf.add_n([tf.reduce_sum(expected[n] * w[n]) for n in w])
    assert calls == [4]
    assert sorted(out) == sorted(expected)
    for name in out:
        np.testing.assert_allclose(out[name].numpy(), expected[name].numpy(), rtol=1e-6, atol=1e-6)
    for table in layer.tables.values():
        assert_same_gradient(tape.gradient(loss, table), tape.gradient(expected_loss, table))
    stored = sorted(int(k) for k in layer.tables["user"].export()[0].numpy())
    assert PAD not in stored and set(stored) <= set(KEYS.tolist())


# --- functional model, fit ---------------------------------------------------------------


def weighted_features_model():
    inputs = {
        "terms": keras.Input(shape=(None,), dtype="int64", ragged=True, name="terms"),
        "term_weights": keras.Input(
            shape=(None,), dtype="float32", ragged=True, name="term_weights"
        ),
        "title": keras.Input(shape=(None,), dtype="int64", ragged=True, name="title"),
        "user": keras.Input(shape=(MAX_IDS + 2,), dtype="int64", name="user"),
        "user_weights": keras.Input(shape=(MAX_IDS + 2,), dtype="float32", name="user_weights"),
        "cross": keras.Input(shape=(None,), dtype="int64", sparse=True, name="cross"),
        "cross_weights": keras.Input(
            shape=(None,), dtype="float32", sparse=True, name="cross_weights"
        ),
    }
    seeds = {"terms": 0, "user": 1, "cross": 2}  # per table: its features must agree
    seeded = [
        dataclasses.replace(
            f, initializer=keras.initializers.RandomNormal(seed=seeds[f.table_name])
        )
        for f in FEATURES
    ]
    out = EmbeddingCollection(seeded, name="features")(inputs)
    # The same weighted lookup through an Embedding: (ids, weights).
    extra = Embedding(ROWS, DIM, weighted=True, name="extra", initializer="ones")(
        (inputs["terms"], inputs["term_weights"])
    )
    h = keras.layers.Concatenate()([out[f.name] for f in FEATURES] + [extra])
    logits = seeded_head(h)
    return keras.Model(inputs, logits)


def dataset():
    rng = np.random.default_rng(0)
    batches = []
    for step in range(STEPS):
        x = collection_inputs(seed=10 * step)
        del x["unused"]
        batches.append((x, rng.standard_normal([BATCH, 1]).astype(np.float32)))
    return batches


def test_fit_equals_a_gradient_tape_loop():
    fitted, manual = weighted_features_model(), weighted_features_model()
    fitted.compile(optimizer=OptimizerWrapper(keras.optimizers.Adam(0.05)), loss="mse")
    data = dataset()
    for x, y in data:
        fitted.fit(tf.data.Dataset.from_tensors((x, y)), epochs=1, verbose=0, shuffle=False)
    manual_training(manual, keras.optimizers.Adam(0.05), data)

    # fit and the loop sum the loss in different orders (see test_keras_fit.py): round-off.
    tolerance = dict(rtol=1e-5, atol=1e-6)
    got, want = fitted.get_layer("features").tables, manual.get_layer("features").tables
    got["extra"] = fitted.get_layer("extra").embeddings
    want["extra"] = manual.get_layer("extra").embeddings
    for name in ("terms", "cross", "extra"):
        np.testing.assert_allclose(got[name].numpy(), want[name].numpy(), **tolerance)
    assert np.any(got["extra"].numpy() != 1.0)  # the Embedding's table trained too
    a, b = rows_by_key(got["user"], with_slots=True), rows_by_key(want["user"], with_slots=True)
    assert a and sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], err_msg=key, **tolerance)
    dense_got = sok.filter_variables(fitted.weights)[1]
    dense_want = sok.filter_variables(manual.weights)[1]
    for g, w in zip(dense_got, dense_want, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), **tolerance)


def test_keras_file_round_trip(tmp_path):
    model = weighted_features_model()
    x = dataset()[0][0]
    expected = model(x).numpy()
    model.save(str(tmp_path / "model.keras"))
    loaded = keras.models.load_model(str(tmp_path / "model.keras"))
    np.testing.assert_allclose(loaded(x).numpy(), expected, rtol=1e-6)
    assert loaded.get_layer("extra").weighted


def test_config_round_trip():
    layer = Embedding(ROWS, DIM, weighted=True, pad_value=PAD, name="emb")
    copy = keras.layers.deserialize(keras.layers.serialize(layer))
    assert copy.weighted and copy.get_config() == layer.get_config()
    collection = EmbeddingCollection(FEATURES, name="features")
    config = json.loads(json.dumps(collection.get_config()))
    assert config["features"][0]["weight_feature"] == "term_weights"
    copy = EmbeddingCollection.from_config(config)
    assert copy.get_config() == collection.get_config()
    assert [f.weight_feature for f in copy.features] == [f.weight_feature for f in FEATURES]


# --- errors ------------------------------------------------------------------------------


def test_bad_specs():
    with pytest.raises(ValueError, match="feature 'a': weight_feature must name another"):
        FeatureSpec("a", 3, 2, weight_feature="a")
    with pytest.raises(ValueError, match="feature 'a': weight_feature must be a non-empty"):
        FeatureSpec("a", 3, 2, weight_feature="")
    with pytest.raises(ValueError, match="feature 'a': weight_feature 'b' is the name of a feat"):
        EmbeddingCollection([FeatureSpec("a", 3, 2, weight_feature="b"), FeatureSpec("b", 3, 2)])


def test_bad_inputs_name_the_feature():
    layer = EmbeddingCollection(
        [FeatureSpec("a", 5, 2, weight_feature="a_w"), FeatureSpec("b", 5, 2)], name="cols"
    )
    ids = tf.ragged.constant([[1, 2], [3]], tf.int64)
    weights = tf.ragged.constant([[0.5, 1.0], [2.0]])
    with pytest.raises(ValueError, match=r"layer 'cols': features \['a'\] are weighted.*dict"):
        layer([ids, ids])
    with pytest.raises(ValueError, match=r"lack the weights 'a_w' \(for feature 'a'\)"):
        layer({"a": ids, "b": ids})
    label = "layer 'cols', feature 'a'"
    with pytest.raises(ValueError, match=f"{label}: weights must be floating point, got int"):
        layer({"a": ids, "a_w": ids, "b": ids})
    with pytest.raises(ValueError, match=f"{label}: dense weights for ragged ids"):
        layer({"a": ids, "a_w": weights.to_tensor(), "b": ids})
    with pytest.raises(ValueError, match=f"{label}: sparse weights for dense ids"):
        layer({"a": ids.to_tensor(), "a_w": weights.to_sparse(), "b": ids})
    with pytest.raises(ValueError, match=rf"{label}: weights of shape \(2, 3\) for ids of shape"):
        layer({"a": ids.to_tensor(), "a_w": tf.ones([2, 3]), "b": ids})
    other_rows = tf.ragged.constant([[0.5], [1.0, 2.0]])
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{label}: .*other row lengths"):
        layer({"a": ids, "a_w": other_rows, "b": ids})
    other_indices = tf.SparseTensor([[0, 0], [0, 2], [1, 0]], [0.5, 1.0, 2.0], [2, 3])
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{label}: .*other indices"):
        layer({"a": ids.to_sparse(), "a_w": other_indices, "b": ids})


def test_weighted_embedding_takes_ids_and_weights():
    layer = Embedding(5, 2, weighted=True, name="emb")
    with pytest.raises(ValueError, match=r"layer 'emb' is weighted: call it on a tuple"):
        layer(tf.constant([[1, 2]]))
    ids = keras.Input(shape=(None,), dtype="int64", ragged=True)
    weights = keras.Input(shape=(None,), dtype="int32", ragged=True)
    with pytest.raises(ValueError, match="feature 'emb': weights must be floating point"):
        layer((ids, weights))
