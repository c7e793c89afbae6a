"""Keras' loading calls that fail change nothing: a model with a static and a hash-table
feature keeps every weight and table row, and the files beside it, when load_weights or
load_model is given a file that does not fit."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from tests.robustness.worlds import assert_unchanged, file_state, ids, table_state

REGISTERED = ("keras.Model.load_weights", "keras.saving.load_model")


def item_and_click_model(item_dim: int = 4, click_dim: int = 3) -> keras.Model:
    inputs = {
        "item": keras.Input(shape=(None,), dtype="int64", ragged=True, name="item"),
        "click": keras.Input(shape=(None,), dtype="int64", ragged=True, name="click"),
    }
    features = sok.keras.EmbeddingCollection(
        [
            sok.keras.FeatureSpec("item", input_dim=50, output_dim=item_dim),
            sok.keras.FeatureSpec("click", output_dim=click_dim),  # a hash table
        ]
    )(inputs)
    joined = keras.layers.Concatenate()([features["item"], features["click"]])
    return keras.Model(inputs, keras.layers.Dense(1, name="head")(joined))


def batch() -> dict:
    return {"item": ids([[1, 2], [3]]), "click": ids([[2**40, 7], [-5]])}


def model_state(model: keras.Model, root) -> dict:
    tables = {}
    for i, weight in enumerate(model.weights):
        if isinstance(weight, (sok.Variable, sok.DynamicVariable)):
            tables.update({f"{i}.{k}": v for k, v in table_state(weight, None).items()})
        else:
            tables[str(i)] = weight.numpy()
    return {"table": tables, "iterations": 0, "files": file_state(root)}


@pytest.fixture
def trained(tmp_path):
    model = item_and_click_model()
    model.compile(optimizer=sok.OptimizerWrapper(keras.optimizers.Adam(0.05)), loss="mse")
    model.fit(batch(), tf.ones([2, 1]), epochs=2, verbose=0)
    return model


def wider_hash_table_weights(root):
    other = item_and_click_model(click_dim=5)
    other(batch())
    other.save_weights(str(root / "other.weights.h5"))
    return root / "other.weights.h5"


def wider_static_table_weights(root):
    other = item_and_click_model(item_dim=6)
    other(batch())
    other.save_weights(str(root / "other.weights.h5"))
    return root / "other.weights.h5"


def truncated_weights(root):
    other = item_and_click_model()
    other(batch())
    path = root / "cut.weights.h5"
    other.save_weights(str(path))
    path.write_bytes(path.read_bytes()[:2000])
    return path


@pytest.mark.parametrize(
    "make_file", [wider_hash_table_weights, wider_static_table_weights, truncated_weights]
)
def test_load_weights_that_do_not_fit_change_nothing(trained, tmp_path, make_file):
    path = make_file(tmp_path)
    before = model_state(trained, tmp_path)
    with pytest.raises(Exception):  # noqa: B017 -- Keras' own errors (ValueError, OSError)
        trained.load_weights(str(path))
    assert_unchanged(before, model_state(trained, tmp_path), f"load_weights({path.name})")


def test_load_model_of_a_damaged_file_changes_nothing(trained, tmp_path):
    path = tmp_path / "model.keras"
    trained.save(path)
    path.write_bytes(path.read_bytes()[:3000])
    before = model_state(trained, tmp_path)
    with pytest.raises(Exception):  # noqa: B017 -- Keras' own error for a damaged zip
        keras.saving.load_model(path)
    assert_unchanged(before, model_state(trained, tmp_path), "load_model(damaged)")


def test_a_hash_table_weight_of_another_width_is_refused_naming_it(trained, tmp_path):
    path = wider_hash_table_weights(tmp_path)
    with pytest.raises(ValueError, match="hash table of dimension 3"):
        trained.load_weights(str(path))
    np.testing.assert_equal(len(trained.weights), len(item_and_click_model().weights))
