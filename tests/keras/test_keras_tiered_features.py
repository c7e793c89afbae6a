"""Hash-table features with a disk tier (FeatureSpec / Embedding `storage=sok.storage.Disk`):
model.fit over a RAM budget far smaller than the table trains exactly as an all-RAM table,
each table of a layer gets its own tier directory, the configs round-trip, bad settings name
the feature, and the same holds under MirroredStrategy."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.comm.shards import ReplicaShards
from sok_lite.keras import Embedding, EmbeddingCollection, FeatureSpec, OptimizerWrapper
from tests.common import rows_by_key, seeded_head
from tests.distributed.strategy_launcher import run_workers

DIM, SLOTS, BATCH, STEPS, PAD = 32, 2, 16, 12, -1
POOL = 300  # user keys drawn from (~190 of them over the run)
ITEMS = 20
# An Adam row of DIM=32 takes ~480 bytes of the budget in RAM, the disk index ~4 KiB at this
# size: this budget keeps ~43 rows in RAM (one batch needs at most 32), a quarter of the table or
# less.
BUDGET = "24KiB"


def user_keys(ids: np.ndarray) -> np.ndarray:
    """Large int64 keys of both signs for pool indices `ids`."""
    return (ids * 7919 - 2**45).astype(np.int64)


def features(storage=None) -> list:
    seeded = keras.initializers.RandomNormal
    return [
        FeatureSpec(
            "user", output_dim=DIM, pad_value=PAD, initializer=seeded(seed=3), storage=storage
        ),
        FeatureSpec("item", ITEMS, DIM, combiner="mean", initializer=seeded(seed=4)),
    ]


def user_and_item_model(storage=None) -> keras.Model:
    """Dense inputs (what MirroredStrategy takes): "user" [batch, SLOTS] keys padded with PAD,
    "item" [batch, 1] ids. Seeded initializers: two models start alike."""
    inputs = {
        "user": keras.Input(shape=(SLOTS,), dtype="int64", name="user"),
        "item": keras.Input(shape=(1,), dtype="int64", name="item"),
    }
    out = EmbeddingCollection(features(storage), name="features")(inputs)
    h = keras.layers.Concatenate()([out["user"], out["item"]])
    logits = seeded_head(h)
    model = keras.Model(inputs, logits)
    model.compile(optimizer=OptimizerWrapper(keras.optimizers.Adam(0.05)), loss="mse")
    return model


def dataset(steps=STEPS, seed=0) -> tf.data.Dataset:
    """Keys drawn uniformly from the pool: rows spill, and many are looked up again later."""
    rng = np.random.default_rng(seed)
    n = BATCH * steps
    user = user_keys(rng.integers(0, POOL, (n, SLOTS)))
    user[rng.random((n, SLOTS)) < 0.2] = PAD
    item = rng.integers(0, ITEMS, (n, 1))
    labels = rng.standard_normal([n, 1]).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices(({"user": user, "item": item}, labels)).batch(BATCH)


def fit(model, data) -> None:
    model.fit(data, epochs=1, verbose=0, shuffle=False)


def shards_and_ranks(table):
    if isinstance(table, ReplicaShards):
        return list(zip(table.ranks, table.shards))
    return [(sok.rank(), table)]


def rows_over_shards(table) -> dict:
    """{key: row with its Adam slots} over the table's shards in this process."""
    rows = {}
    for _, shard in shards_and_ranks(table):
        rows.update(rows_by_key(shard, with_slots=True))
    return rows


def dense_weights(model) -> list:
    return [np.asarray(w.numpy()) for w in sok.filter_variables(model.weights)[1]]


def assert_bitwise_same_training(tiered: keras.Model, ram: keras.Model) -> None:
    """Bit for bit: the tier only moves records between RAM and the file."""
    a = rows_over_shards(tiered.get_layer("features").tables["user"])
    b = rows_over_shards(ram.get_layer("features").tables["user"])
    assert sorted(a) == sorted(b) and len(a) > 100
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=f"key {key}")
    for got, want in zip(dense_weights(tiered), dense_weights(ram), strict=True):
        np.testing.assert_array_equal(got, want)


# --- training --------------------------------------------------------------------------------


def test_fit_with_a_disk_tier_equals_an_all_ram_table(tmp_path):
    disk = sok.storage.Disk(tmp_path / "tier", ram_budget=BUDGET)
    tiered, ram = user_and_item_model(disk), user_and_item_model()
    fit(tiered, dataset())
    fit(ram, dataset())
    assert_bitwise_same_training(tiered, ram)

    table = tiered.get_layer("features").tables["user"]
    assert table.storage == disk
    stats = table.memory_stats()
    assert stats["rows_disk"] > 0 and stats["misses"] > 0, stats  # spilled, and read back
    all_ram = len(rows_over_shards(table))
    assert stats["rows_ram"] * 4 <= all_ram, stats
    assert os.listdir(tmp_path / "tier") == ["user.rank0"]


def test_tables_of_one_layer_get_their_own_tier_directories(tmp_path):
    disk = sok.storage.Disk(tmp_path / "tier", ram_budget=BUDGET)

    def collection(storage):
        seeded = keras.initializers.RandomNormal
        return EmbeddingCollection(
            [
                FeatureSpec("user", output_dim=DIM, initializer=seeded(seed=3), storage=storage),
                FeatureSpec("query", output_dim=DIM, initializer=seeded(seed=5), storage=storage),
                FeatureSpec(
                    "history",
                    output_dim=DIM,
                    combiner="mean",
                    initializer=seeded(seed=3),
                    table="user",
                    storage=storage,
                ),
            ]
        )

    layer, ram = collection(disk), collection(None)
    rng = np.random.default_rng(0)
    for _ in range(8):
        # The same keys for both tables: a shared tier file would mix their rows up.
        ids = tf.constant(user_keys(rng.integers(0, POOL, (BATCH, SLOTS))))
        inputs = {"user": ids, "query": ids, "history": ids[:, :1]}
        got, want = layer(inputs), ram(inputs)
        for name in inputs:
            np.testing.assert_array_equal(got[name].numpy(), want[name].numpy(), err_msg=name)
    assert sorted(os.listdir(tmp_path / "tier")) == ["query.rank0", "user.rank0"]
    for name in ("user", "query"):
        stats = layer.tables[name].memory_stats()
        assert stats["rows_disk"] > 0 and stats["misses"] > 0, (name, stats)
        assert (tmp_path / "tier" / f"{name}.rank0" / "rows.bin").exists()


def test_embedding_layer_takes_storage(tmp_path):
    layer = Embedding(output_dim=DIM, storage=sok.storage.Disk(tmp_path, "8KiB"), name="clicks")
    for step in range(6):  # 12 new keys per lookup: more than the budget holds in all
        layer(tf.constant(user_keys(np.arange(12 * step, 12 * step + 12).reshape(4, 3))))
    assert isinstance(layer.embeddings, sok.DynamicVariable)
    assert layer.storage == layer.embeddings.storage == sok.storage.Disk(tmp_path, 8192)
    assert layer.embeddings.memory_stats()["rows_disk"] > 0
    assert os.listdir(tmp_path) == ["embeddings.rank0"]  # the table's name


def test_keras_file_round_trip(tmp_path):
    disk = sok.storage.Disk(tmp_path / "tier", ram_budget=BUDGET)
    model = user_and_item_model(disk)
    fit(model, dataset())
    model.save(str(tmp_path / "model.keras"))
    loaded = keras.models.load_model(str(tmp_path / "model.keras"))
    table = loaded.get_layer("features").tables["user"]
    assert table.storage == disk and table.memory_stats()["rows_disk"] > 0
    # The loaded table has a directory of its own beside the first one's.
    assert sorted(os.listdir(tmp_path / "tier")) == ["user.rank0", "user.rank0.1"]
    more = dataset(steps=2, seed=1)
    fit(model, more)
    fit(loaded, more)
    assert_bitwise_same_training(loaded, model)


# --- configs and errors ----------------------------------------------------------------------


def test_config_round_trip(tmp_path):
    disk = sok.storage.Disk(tmp_path, ram_budget="1MiB")
    plain = {"path": str(tmp_path), "ram_budget": 2**20}
    spec = FeatureSpec("user", output_dim=DIM, storage=disk)
    assert spec.get_config()["storage"] == plain
    assert FeatureSpec(**json.loads(json.dumps(spec.get_config()))) == spec
    # A dict with a budget string, or a path object, is the same Disk.
    as_dict = FeatureSpec("user", output_dim=DIM, storage={"path": tmp_path, "ram_budget": "1MiB"})
    assert as_dict == spec and as_dict.storage == disk

    layer = Embedding(output_dim=DIM, storage=disk, name="emb")
    assert layer.get_config()["storage"] == plain
    copy = keras.layers.deserialize(json.loads(json.dumps(keras.layers.serialize(layer))))
    assert copy.get_config() == layer.get_config() and copy.storage == disk
    assert Embedding(output_dim=DIM).get_config()["storage"] is None

    collection = EmbeddingCollection(features(disk), name="features")
    copy = EmbeddingCollection.from_config(json.loads(json.dumps(collection.get_config())))
    assert copy.get_config() == collection.get_config()
    copy.build()
    assert copy.tables["user"].storage == disk


@pytest.mark.parametrize(
    "spec, message",
    [
        (dict(input_dim=10, storage={"path": "/tmp", "ram_budget": 4096}), r"storage=Disk\(.*only"),
        (dict(capacity=100, storage={"path": "/tmp", "ram_budget": 4096}), r"capacity drops rows"),
        (dict(storage="/tmp"), r"storage must be None, sok.storage.Disk"),
        (dict(storage={"path": "/tmp"}), r"storage must be None, sok.storage.Disk"),
        (dict(storage={"path": "/tmp", "ram_budget": "lots"}), r"ram_budget 'lots' is not"),
        (dict(storage={"path": "", "ram_budget": 4096}), r"storage.Disk needs a directory"),
    ],
)
def test_bad_storage_names_the_feature(spec, message):
    with pytest.raises(ValueError, match=rf"feature 'clicks': {message}"):
        FeatureSpec("clicks", output_dim=DIM, **spec)
    with pytest.raises(ValueError, match=rf"feature 'clicks': {message}"):
        Embedding(output_dim=DIM, name="clicks", **spec)


def test_features_sharing_a_table_must_agree_on_storage(tmp_path):
    disk = sok.storage.Disk(tmp_path, "1MiB")
    with pytest.raises(ValueError, match=r"share table 'a' but differ .*storage\)"):
        EmbeddingCollection(
            [
                FeatureSpec("a", output_dim=DIM, storage=disk),
                FeatureSpec("b", output_dim=DIM, table="a"),
            ]
        )
    with pytest.raises(ValueError, match=r"share table 'a' but differ .*storage\)"):
        EmbeddingCollection(
            [
                FeatureSpec("a", output_dim=DIM, storage=disk),
                FeatureSpec("b", output_dim=DIM, table="a", storage=sok.storage.Disk(tmp_path, 1)),
            ]
        )


# --- MirroredStrategy ------------------------------------------------------------------------


def test_mirrored_strategy_fit_with_a_disk_tier_equals_an_all_ram_table(tmp_path):
    """Two logical CPUs, one table shard and one tier directory per replica (rank)."""
    run_workers("strategy_tiered_features_worker.py", 0, str(tmp_path), timeout=300)
    for tiered in ("tiered", "prefetched"):  # prefetched: sok.keras.prefetch_rows
        with np.load(tmp_path / f"{tiered}.npz") as a, np.load(tmp_path / "ram.npz") as b:
            assert sorted(a.files) == sorted(b.files)
            for name in b.files:
                np.testing.assert_array_equal(a[name], b[name], err_msg=f"{tiered}: {name}")
            assert len(a["user.keys@0"]) > 50 and len(a["user.keys@1"]) > 50
    stats = json.loads((tmp_path / "stats.json").read_text())
    for rank in ("0", "1"):
        plain, ahead = stats["tiered"][rank], stats["prefetched"][rank]
        assert plain["rows_disk"] > 0 and plain["misses"] > 0, stats
        assert ahead["misses"] < plain["misses"], stats  # both shards were read ahead
    # One tier directory per replica while the model lived; both removed with it at exit.
    assert json.loads((tmp_path / "tiers.json").read_text()) == ["user.rank0", "user.rank1"]
    assert os.listdir(tmp_path / "tier") == []
