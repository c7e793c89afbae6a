"""storage_dtype of sok_lite.keras.FeatureSpec / Embedding: 16-bit tables (fixed-size and hash)
under the float32 and the mixed_bfloat16 / mixed_float16 policies. The layers return the
compute dtype, the tables store the storage dtype, fit equals a GradientTape loop, and a
float64 table under a 16-bit policy or an unsupported storage dtype is refused by name."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.keras import Embedding, EmbeddingCollection, FeatureSpec, OptimizerWrapper
from tests.keras.test_keras_fit import BATCH, DIM, ROWS, STEPS
from tests.keras.test_keras_mixed_precision import hash_rows, hashed_dataset, tape_training

POLICIES = {"float32": "float32", "mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}
EPS = {"bfloat16": 2.0**-7, "float16": 2.0**-10}


@pytest.fixture(autouse=True)
def restore_global_policy():
    saved = keras.mixed_precision.global_policy()
    yield
    keras.mixed_precision.set_global_policy(saved)


def features(storage):
    return [
        FeatureSpec(
            "user",
            output_dim=DIM,
            initializer=keras.initializers.RandomNormal(seed=1),
            storage_dtype=storage,
        ),
        FeatureSpec(
            "item",
            ROWS,
            DIM,
            initializer=keras.initializers.RandomNormal(seed=2),
            storage_dtype=storage,
        ),
    ]


def model_of(storage):
    """A model over a hash-table and a fixed-size feature stored in `storage`; its dense weights
    come from the global seed (two calls build equal models)."""
    keras.utils.set_random_seed(0)
    inputs = {
        "user": keras.Input(shape=(None,), dtype="int64", ragged=True, name="user"),
        "item": keras.Input(shape=(None,), dtype="int64", ragged=True, name="item"),
    }
    out = EmbeddingCollection(features(storage), name="features")(inputs)
    h = keras.layers.Concatenate()([out["user"], out["item"]])
    h = keras.layers.Dense(8, activation="tanh")(h)
    return keras.Model(inputs, keras.layers.Dense(1)(h))


@pytest.mark.parametrize("storage", ["bfloat16", "float16", tf.bfloat16])
def test_config_round_trip(storage):
    name = tf.as_dtype(storage).name
    spec = FeatureSpec("user", output_dim=DIM, storage_dtype=storage)
    assert spec.storage_dtype == name and spec.get_config()["storage_dtype"] == name
    assert FeatureSpec(**spec.get_config()) == spec
    layer = Embedding(ROWS, DIM, storage_dtype=storage, name="emb")
    again = Embedding.from_config(layer.get_config())
    assert again.storage_dtype == name
    collection = EmbeddingCollection(features(storage), name="features")
    restored = EmbeddingCollection.from_config(collection.get_config())
    assert [f.storage_dtype for f in restored.features] == [name, name]
    assert FeatureSpec("user", output_dim=DIM).storage_dtype is None  # the layer's dtype


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("storage", ["bfloat16", "float16"])
def test_layers_return_the_compute_dtype_over_16_bit_tables(policy, storage):
    keras.mixed_precision.set_global_policy(policy)
    ids = tf.ragged.constant([[1, 2], [3]], dtype=tf.int64)
    fixed = Embedding(ROWS, DIM, storage_dtype=storage)
    hashed = Embedding(output_dim=DIM, storage_dtype=storage)
    collection = EmbeddingCollection(features(storage))
    with tf.GradientTape() as tape:
        outputs = [fixed(ids), hashed(ids), *collection({"user": ids, "item": ids}).values()]
        loss = tf.add_n([tf.reduce_sum(tf.cast(out, tf.float32)) for out in outputs])
    tables = [fixed.embeddings, hashed.embeddings, *collection.tables.values()]
    assert [out.dtype.name for out in outputs] == [POLICIES[policy]] * 4
    assert [t.dtype.name for t in tables] == [storage] * 4
    assert isinstance(hashed.embeddings, sok.DynamicVariable)
    for grad in tape.gradient(loss, tables):
        assert isinstance(grad, tf.IndexedSlices) and grad.values.dtype == tf.float32


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_fit_with_bfloat16_tables_equals_a_gradient_tape_loop(policy):
    keras.mixed_precision.set_global_policy(policy)
    fitted, manual = model_of("bfloat16"), model_of("bfloat16")
    data = hashed_dataset(seed=4)
    fitted.compile(optimizer=OptimizerWrapper(keras.optimizers.Adam(0.02)), loss="mse")
    fitted.fit(data, epochs=1, verbose=0, shuffle=False)
    tape_training(manual, keras.optimizers.Adam(0.02), data)

    got_tables = fitted.get_layer("features").tables
    want_tables = manual.get_layer("features").tables
    assert int(fitted.optimizer.iterations.numpy()) == STEPS
    # The same float32 math and the same rounding draws (table name, step, key or row): equal
    # up to one bfloat16 unit where a float32 sum of another order crosses a rounding point.
    fixed_got, fixed_want = got_tables["item"], want_tables["item"]
    assert fixed_got.dtype == tf.bfloat16
    np.testing.assert_allclose(
        fixed_got.numpy().astype(np.float32),
        fixed_want.numpy().astype(np.float32),
        rtol=EPS["bfloat16"],
        atol=1e-6,
    )
    got, want = hash_rows(got_tables["user"]), hash_rows(want_tables["user"])
    assert got.keys() == want.keys() and len(got) > BATCH
    for key in want:
        np.testing.assert_allclose(got[key][:DIM], want[key][:DIM], rtol=EPS["bfloat16"], atol=1e-6)
        np.testing.assert_allclose(got[key][DIM:], want[key][DIM:], rtol=1e-4, atol=1e-7)
        bf16 = got[key][:DIM].astype(tf.bfloat16.as_numpy_dtype).astype(np.float32)
        np.testing.assert_array_equal(got[key][:DIM], bf16)
    dense_got, dense_want = (sok.filter_variables(m.weights)[1] for m in (fitted, manual))
    tol = EPS["bfloat16"] if policy == "mixed_bfloat16" else 1e-5
    for a, b in zip(dense_got, dense_want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol * 0.1)


def test_fit_with_16_bit_tables_trains_as_float32_tables_do():
    """Adam with bfloat16 tables follows float32 tables closely over a few epochs."""
    losses = {}
    for storage in ("float32", "bfloat16"):
        model = model_of(storage)
        model.compile(optimizer=OptimizerWrapper(keras.optimizers.Adam(0.02)), loss="mse")
        history = model.fit(hashed_dataset(seed=5), epochs=4, verbose=0, shuffle=False)
        losses[storage] = history.history["loss"]
    assert losses["bfloat16"][-1] < losses["bfloat16"][0]
    np.testing.assert_allclose(losses["bfloat16"], losses["float32"], rtol=0.02)


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_a_float64_table_under_a_16_bit_policy_is_refused_by_name(policy):
    keras.mixed_precision.set_global_policy(policy)
    ids = tf.ragged.constant([[1]], dtype=tf.int64)
    with pytest.raises(ValueError, match="table 'wide': a float64 table under a"):
        Embedding(ROWS, DIM, storage_dtype="float64", name="wide")(ids)
    collection = EmbeddingCollection([FeatureSpec("f", ROWS, DIM, storage_dtype=tf.float64)])
    with pytest.raises(ValueError, match="table 'f': a float64 table"):
        collection({"f": ids})
    # A float64 layer (policy float64) stores float64 tables as before.
    layer = Embedding(ROWS, DIM, dtype="float64")
    assert layer(ids).dtype == tf.float64 and layer.embeddings.dtype == tf.float64


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(input_dim=ROWS, storage_dtype="int8"), "storage_dtype of a table must be one of"),
        (dict(input_dim=ROWS, storage_dtype="bf16"), "storage_dtype of a table .*got 'bf16'"),
        (dict(storage_dtype="float64"), "storage_dtype of a hash table must be one of"),
    ],
)
def test_unsupported_storage_dtypes_are_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=f"feature 'f': {match}"):
        FeatureSpec("f", output_dim=DIM, **kwargs)
    with pytest.raises(ValueError, match=match):
        Embedding(output_dim=DIM, name="f", **kwargs)


def test_features_sharing_a_table_must_agree_on_its_storage():
    with pytest.raises(ValueError, match="storage_dtype"):
        EmbeddingCollection(
            [
                FeatureSpec("a", ROWS, DIM, table="t", storage_dtype="bfloat16"),
                FeatureSpec("b", ROWS, DIM, table="t"),
            ]
        )


def test_weights_file_round_trip_keeps_16_bit_hash_rows(tmp_path):
    model = model_of("bfloat16")
    model.compile(optimizer=OptimizerWrapper(keras.optimizers.Adam(0.02)), loss="mse")
    model.fit(hashed_dataset(seed=6).take(2), epochs=1, verbose=0, shuffle=False)
    model.save_weights(tmp_path / "w.weights.h5")
    other = model_of("bfloat16")
    other.load_weights(tmp_path / "w.weights.h5")
    got = hash_rows(other.get_layer("features").tables["user"])
    want = hash_rows(model.get_layer("features").tables["user"])
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])
