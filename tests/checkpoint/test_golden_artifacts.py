"""Golden artifacts: files written by an earlier sok_lite release must keep loading.

tests/data/golden/<version>/ holds what scripts/make_golden_artifacts.py wrote with that
release (see its README.md): a `.keras` model, its `.weights.h5`, a `tf.train.Checkpoint` of
the model and its optimizer, a `sok.dump` directory, an `export_saved_model` SavedModel, and
`expected.npz` with fixed probe ids and what each artifact must give for them. Each test loads
one artifact with today's code and compares. A `.keras` file records the registered class names
(`sok_lite>EmbeddingCollection`, `sok_lite>OptimizerWrapper`) and the module paths of the
objects it serializes, so moving or renaming a module fails here before users' files break.
A folder is never rewritten: a release that changes what it writes adds a new version folder.

The model (`build_model`, the definition the artifacts were written from and that the weights,
checkpoint and dump tests build to load into; do not change it) has one fixed-size feature and
three hash-table features: one stored in bfloat16 (`storage_dtype="bfloat16"`) and one with a
disk tier (`storage=sok.storage.Disk`) whose small `ram_budget` keeps part of its rows on disk.

Disk tier path: `FeatureSpec.get_config()` (hence the `.keras` file's config.json) records the
`Disk` path as it was given, and the table resolves it (`os.path.abspath`) when it is built, in
the loading process. The model gives a RELATIVE path, `TIER_PATH`, so the recorded path is
`"golden_tier"` and a load on another machine or checkout creates `<cwd>/golden_tier/
tiered.rank0` under the loader's working directory (these tests chdir to their tmp_path);
an absolute path would name the writing machine's directory, which elsewhere may not exist
or be writable. The tier's files are a cache (rebuilt from the saved rows on load), so nothing
of the writer's tier is needed.

Exactness: what the artifacts store (table rows, optimizer slots beside hash rows, static
tables' slots, the optimizer's step) must come back bit for bit, so it is compared exactly
(bfloat16 rows are stored as float32 holding the bfloat16 values exactly). Outputs computed
from them (lookup results, predictions) are compared with rtol=1e-5, atol=1e-6 (`TOL`): a later
TF, Keras or CPU may sum in another order (oneDNN/Eigen matmul kernels, the SavedModel's plain
TF combiners, as tests/checkpoint/test_serving.py), a difference of a few float32 ulps; a
wrong row moves them by far more (rows are ~0.05-1).
"""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.keras import EmbeddingCollection, FeatureSpec, OptimizerWrapper

VERSION = "v0.1"
GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden" / VERSION
TOL = {"rtol": 1e-5, "atol": 1e-6}

# --- the model the artifacts were written from (frozen for v0.1) -------------------------------

TIER_PATH = "golden_tier"  # relative: resolved against the loading process's working directory
TIER_BUDGET = 6144  # bytes: the tier keeps part of its ~40 rows on disk
FEATURES = ("item", "user", "query", "tiered")
SLOTS = {"item": 2, "user": 2, "query": 3, "tiered": 2}  # ids per sample (dense inputs)
POOLS = {"item": 24, "user": 30, "query": 20, "tiered": 48}  # distinct ids per feature
PAD = -1
BATCH, STEPS = 8, 6


def build_model() -> keras.Model:
    """The compiled v0.1 model: dense int64 inputs, one id slot padded with PAD."""
    normal, uniform = keras.initializers.RandomNormal, keras.initializers.RandomUniform
    features = [
        FeatureSpec("item", POOLS["item"], 4, initializer=normal(0.0, 0.1, seed=11), pad_value=PAD),
        FeatureSpec("user", output_dim=4, initializer=normal(0.0, 0.2, seed=12), pad_value=PAD),
        FeatureSpec(
            "query",
            output_dim=8,
            combiner="mean",
            initializer=uniform(-0.1, 0.1, seed=13),
            pad_value=PAD,
            storage_dtype="bfloat16",
        ),
        FeatureSpec(
            "tiered",
            output_dim=4,
            combiner="sqrtn",
            initializer=keras.initializers.TruncatedNormal(0.0, 0.1, seed=14),
            pad_value=PAD,
            storage=sok.storage.Disk(TIER_PATH, TIER_BUDGET),
        ),
    ]
    inputs = {f: keras.Input(shape=(SLOTS[f],), dtype="int64", name=f) for f in FEATURES}
    out = EmbeddingCollection(features, name="features")(inputs)
    h = keras.layers.Concatenate()([out[f] for f in FEATURES])
    h = keras.layers.Dense(8, "tanh", kernel_initializer=keras.initializers.GlorotUniform(1))(h)
    logits = keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(2))(h)
    model = keras.Model(inputs, logits)
    model.compile(optimizer=OptimizerWrapper(keras.optimizers.Adam(0.05)), loss="mse")
    return model


def ids(rng, feature: str, rows: int, pool: int | None = None) -> np.ndarray:
    """[rows, SLOTS] ids of `feature` (about 1 in 5 padded): fixed-size ids as they are, hash
    keys spread over int64 (both signs) from pool indices."""
    index = rng.integers(0, pool or POOLS[feature], (rows, SLOTS[feature]))
    out = index if feature == "item" else index * 7_919_000_003 - 2**52
    out = out.astype(np.int64)
    out[rng.random(out.shape) < 0.2] = PAD
    return out


def training_data() -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    x = {f: ids(rng, f, BATCH * STEPS) for f in FEATURES}
    y = rng.standard_normal([BATCH * STEPS, 1]).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)


def probe_inputs() -> dict:
    """6 samples of trained ids and ids no step saw (wider pools: new hash keys)."""
    rng = np.random.default_rng(1)
    return {f: ids(rng, f, 6, pool=None if f == "item" else 2 * POOLS[f]) for f in FEATURES}


# --- what an artifact holds -------------------------------------------------------------------


def table_state(model) -> dict:
    """expected.npz's entries for the tables: hash tables' keys and rows (value, then the
    optimizer slots kept beside them) sorted by key, the static table's value and slots."""
    out = {}
    for name, table in model.get_layer("features").tables.items():
        if isinstance(table, sok.DynamicVariable):
            keys, rows = table.export(with_slots=True)
            order = np.argsort(keys.numpy())
            out[f"table/{name}/keys"] = keys.numpy()[order]
            out[f"table/{name}/rows"] = rows.numpy()[order]
        else:
            out[f"table/{name}/value"] = table.numpy()
            for slot, value in sok.opt_slots(model.optimizer.inner_optimizer, table).items():
                out[f"table/{name}/slot/{slot}"] = value.numpy()
    return out


def outputs(model, x) -> dict:
    """The lookup results per feature and the predictions for probe ids `x` (the lookups store
    unseen keys: read table_state first)."""
    looked_up = model.get_layer("features")(x)
    out = {f"lookup/{f}": looked_up[f].numpy() for f in FEATURES}
    out["predictions"] = model(x).numpy()
    return out


# --- tests ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def expected():
    with np.load(GOLDEN / "expected.npz") as data:
        return dict(data)


@pytest.fixture(autouse=True)
def tier_cwd(tmp_path, monkeypatch):
    """The tier's relative path resolves under tmp_path."""
    monkeypatch.chdir(tmp_path)


def probe(expected) -> dict:
    return {f: tf.constant(expected[f"probe/{f}"]) for f in FEATURES}


def assert_tables(model, expected):
    """Every table's rows and optimizer slots equal expected.npz's, exactly."""
    got = table_state(model)
    assert set(got) == {k for k in expected if k.startswith("table/")}
    for key, value in got.items():
        np.testing.assert_array_equal(value, expected[key], err_msg=key)


def assert_outputs(model, expected, keys=None):
    got = outputs(model, probe(expected))
    for key in keys or got:
        np.testing.assert_allclose(got[key], expected[key], err_msg=key, **TOL)


def fresh_model() -> keras.Model:
    """build_model() with its optimizer built: the state to load into (Keras, tf.train and
    sok.load restore a built optimizer's slots and step)."""
    model = build_model()
    model.optimizer.build(model.trainable_variables)
    return model


def assert_tier_here(model, tmp_path):
    table = model.get_layer("features").tables["tiered"]
    assert table.storage == sok.storage.Disk(TIER_PATH, TIER_BUDGET)
    assert (tmp_path / TIER_PATH / "tiered.rank0").is_dir()
    assert table.memory_stats()["rows_disk"] > 0


def test_expected_covers_every_artifact(expected):
    for name in ("model.keras", "model.weights.h5", "tf_checkpoint", "dump", "saved_model"):
        assert (GOLDEN / name).exists(), name
    assert (GOLDEN / "README.md").exists()
    assert int(expected["iterations"]) == STEPS
    assert len(expected["table/tiered/keys"]) > 30 and expected["predictions"].shape == (6, 1)


def _keras_version(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:3] if part.isdigit())


def test_keras_file(expected, tmp_path):
    with zipfile.ZipFile(GOLDEN / "model.keras") as archive:
        writer = json.loads(archive.read("metadata.json"))["keras_version"]
    if _keras_version(keras.__version__) < _keras_version(writer):
        # Keras reads the .keras files of its own version and older ones, not newer ones (a newer
        # Keras adds arguments to layers' and initializers' configs): a downgrade, not an upgrade.
        pytest.skip(f"Keras {keras.__version__} cannot read a .keras file written by {writer}")
    model = keras.models.load_model(GOLDEN / "model.keras")
    tables = model.get_layer("features").tables
    assert isinstance(tables["item"], sok.Variable)
    assert [t.dtype for t in tables.values()] == [tf.float32, tf.float32, tf.bfloat16, tf.float32]
    assert isinstance(model.optimizer, OptimizerWrapper)
    assert int(model.optimizer.iterations.numpy()) == int(expected["iterations"])
    assert_tier_here(model, tmp_path)
    assert_tables(model, expected)
    assert_outputs(model, expected)


def test_weights_file(expected):
    model = fresh_model()
    model.load_weights(GOLDEN / "model.weights.h5")
    assert int(model.optimizer.iterations.numpy()) == int(expected["iterations"])
    assert_tables(model, expected)
    assert_outputs(model, expected)


def test_tf_train_checkpoint(expected, tmp_path):
    model = fresh_model()
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    checkpoint.read(str(GOLDEN / "tf_checkpoint" / "ckpt")).assert_consumed()
    assert int(model.optimizer.iterations.numpy()) == int(expected["iterations"])
    assert_tier_here(model, tmp_path)
    assert_tables(model, expected)
    assert_outputs(model, expected)


def test_sok_dump(expected):
    model = fresh_model()
    tables = list(model.get_layer("features").tables.values())
    sok.load(GOLDEN / "dump", tables, model.optimizer)
    assert int(model.optimizer.iterations.numpy()) == int(expected["iterations"])
    assert_tables(model, expected)
    # A dump holds the tables only: compare what they give, not the predictions.
    assert_outputs(model, expected, keys=[f"lookup/{f}" for f in FEATURES])


SERVE = """
import json, sys
sys.modules["sok_lite"] = None  # importing sok_lite would fail: the model must not need it
import numpy as np, tensorflow as tf
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
args = {name: tf.constant(np.load(sys.argv[2])[f"probe/{name}"]) for name in sys.argv[3:]}
print(json.dumps(list(serve(**args).values())[0].numpy().tolist()))
"""


def test_saved_model_serves_without_sok_lite(expected):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [
        sys.executable,
        "-c",
        SERVE,
        str(GOLDEN / "saved_model"),
        str(GOLDEN / "expected.npz"),
    ]
    proc = subprocess.run(
        command + list(FEATURES), capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    served = np.array(json.loads(proc.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(served, expected["predictions"], **TOL)
