"""sok.keras.prefetch_rows: `model.fit` on a dataset that reads each batch's rows back from the
disk tier one batch ahead trains exactly as the all-RAM table and as the tier without prefetch
(bit for bit), with fewer misses; every tiered table of a layer is covered; bad arguments are
refused. MirroredStrategy: tests/keras/test_keras_tiered_features.py."""

import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.keras import Embedding, EmbeddingCollection, FeatureSpec
from tests.keras.test_keras_tiered_features import (
    BUDGET,
    DIM,
    assert_bitwise_same_training,
    dataset,
    fit,
    user_and_item_model,
    user_keys,
)

STEPS = 24


def test_fit_with_prefetch_equals_the_all_ram_table_and_misses_less(tmp_path):
    plain = user_and_item_model(sok.storage.Disk(tmp_path / "plain", ram_budget=BUDGET))
    ahead = user_and_item_model(sok.storage.Disk(tmp_path / "ahead", ram_budget=BUDGET))
    ram = user_and_item_model()
    fit(plain, dataset(STEPS))
    fit(ahead, sok.keras.prefetch_rows(dataset(STEPS), ahead.get_layer("features")))
    fit(ram, dataset(STEPS))
    assert_bitwise_same_training(ahead, ram)
    assert_bitwise_same_training(plain, ram)
    p = plain.get_layer("features").tables["user"].memory_stats()
    a = ahead.get_layer("features").tables["user"].memory_stats()
    assert a["hits"] + a["misses"] == p["hits"] + p["misses"]
    assert a["misses"] < p["misses"], (p, a)


def test_fit_returns_promptly_after_the_last_step(tmp_path):
    # The pipeline may prefetch a batch that no step looks up: its wait for a lookup ends when
    # fit tears the pipeline down (or after at most a second), not later.
    model = user_and_item_model(sok.storage.Disk(tmp_path, ram_budget=BUDGET))
    data = sok.keras.prefetch_rows(dataset(STEPS), model.get_layer("features"))
    fit(model, data.take(2))
    start = time.perf_counter()
    model.fit(data, epochs=1, steps_per_epoch=3, verbose=0, shuffle=False)
    assert time.perf_counter() - start < 30


def test_every_tiered_table_of_a_collection_is_read_ahead(tmp_path):
    disk = sok.storage.Disk(tmp_path, ram_budget="24KiB")
    seeded = keras.initializers.RandomNormal
    features = [
        FeatureSpec(name, output_dim=DIM, initializer=seeded(seed=3), storage=disk)
        for name in ("user", "query")
    ] + [FeatureSpec("item", 20, DIM)]
    layer = EmbeddingCollection(features)
    layer.build()
    rng = np.random.default_rng(0)
    x = {
        "user": user_keys(rng.integers(0, 300, (160, 2))),
        "query": user_keys(rng.integers(0, 300, (160, 2))),
        "item": rng.integers(0, 20, (160, 1)),
    }
    data = tf.data.Dataset.from_tensor_slices((x, np.zeros(160, np.float32))).batch(16)
    batches = list(data)
    for name in ("user", "query"):  # every key stored, most of them on disk
        for inputs, _ in batches:
            layer({"user": inputs[name], "query": inputs[name], "item": inputs["item"]})
        assert layer.tables[name].memory_stats()["rows_disk"] > 50
    before = {n: layer.tables[n].memory_stats()["rows_disk"] for n in ("user", "query")}
    next(iter(sok.keras.prefetch_rows(data, layer)))
    after = {n: layer.tables[n].memory_stats()["rows_disk"] for n in ("user", "query")}
    assert all(after[n] != before[n] for n in after), (before, after)


def test_embedding_layer_and_an_inputs_function(tmp_path):
    layer = Embedding(output_dim=DIM, storage=sok.storage.Disk(tmp_path, "24KiB"), name="clicks")
    for step in range(12):
        layer(tf.constant(user_keys(np.arange(12 * step, 12 * step + 12).reshape(4, 3))))
    ids = user_keys(np.arange(12).reshape(4, 3))  # the first batch's keys: on disk
    data = tf.data.Dataset.from_tensors(({"clicks": ids}, np.zeros(4, np.float32)))
    out = list(sok.keras.prefetch_rows(data, layer, inputs=lambda x: x["clicks"]))
    np.testing.assert_array_equal(out[0][0]["clicks"].numpy(), ids)  # elements unchanged
    before = layer.embeddings.memory_stats()
    layer(tf.constant(ids))
    assert layer.embeddings.memory_stats()["hits"] - before["hits"] == 12


def test_bad_layers_are_refused():
    data = tf.data.Dataset.from_tensors({"item": [[1]]})
    with pytest.raises(ValueError, match="Embedding or EmbeddingCollection, got Dense"):
        sok.keras.prefetch_rows(data, keras.layers.Dense(1))
    with pytest.raises(ValueError, match="'late' is not built"):
        sok.keras.prefetch_rows(data, EmbeddingCollection([FeatureSpec("item", 5, 2)], name="late"))
