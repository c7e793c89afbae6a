"""The version checks: an op library is loaded only under the TensorFlow it was built against
(its build record), and a private TensorFlow/Keras name that has moved fails the features that
need it, clearly, while sok_lite imports and its other features work (docs/install.md,
"Version checks")."""

import importlib.metadata
import json
import pathlib
import re
import shutil
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite import _loader, _tf_internals
from sok_lite._tf_internals import FEATURES, NAMES, MissingInternalError
from sok_lite._tf_range import KERAS_MIN, TF_MAX, TF_MIN
from tests.common import gradient_row_checks

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The package under test: the source tree's, or an installed wheel's (make wheel-check).
PACKAGE = pathlib.Path(sok.__file__).resolve().parent
LIBRARY = sorted(PACKAGE.glob("_sok_lite_ops*.so"))[0]
# A TensorFlow of another minor than the running one (the build record a library made there has).
_MAJOR, _MINOR = (int(x) for x in tf.__version__.split(".")[:2])
OTHER_TF = f"{_MAJOR}.{_MINOR - 1 if _MINOR > 16 else _MINOR + 1}.1"


@pytest.mark.skipif(shutil.which("readelf") is None, reason="needs binutils' readelf")
def test_the_library_declares_its_dependency_on_the_tensorflow_framework():
    """Without it the library only loads where TensorFlow loaded its framework globally."""
    dynamic = subprocess.run(["readelf", "-d", str(LIBRARY)], capture_output=True, text=True)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic.stdout)
    assert "libtensorflow_framework.so.2" in needed, needed


def _library_with_record(tmp_path: pathlib.Path, record: dict | None) -> pathlib.Path:
    """A stand-in library (never loaded: the check comes first) with the given build record."""
    library = tmp_path / LIBRARY.name
    library.write_bytes(b"not a library")
    if record is not None:
        (tmp_path / "_sok_lite_ops.build.json").write_text(json.dumps(record))
    return library


def test_the_build_records_the_running_tensorflow_and_abi_flag():
    record = json.loads(_loader.record_path(LIBRARY).read_text())
    assert record["tensorflow"] == tf.__version__
    assert f"-D_GLIBCXX_USE_CXX11_ABI={record['cxx11_abi']}" in tf.sysconfig.get_compile_flags()
    _loader.check_build(LIBRARY)  # the matching library passes (and loads: other tests use it)


def test_a_library_built_against_another_tensorflow_is_refused(tmp_path):
    running = _loader.running_build()
    library = _library_with_record(tmp_path, dict(running, tensorflow=OTHER_TF))
    with pytest.raises(ImportError) as raised:
        _loader.check_build(library)
    message = str(raised.value)
    assert isinstance(raised.value, _loader.VersionMismatchError)
    assert f"built against TensorFlow {OTHER_TF}" in message
    assert f"TensorFlow {tf.__version__} is running" in message
    assert "pip install --no-build-isolation --no-deps --force-reinstall ." in message
    assert "make build" in message and _loader.SKIP_VARIABLE in message


def test_a_patch_release_of_the_same_minor_needs_no_rebuild(tmp_path):
    major, minor = tf.__version__.split(".")[:2]
    running = _loader.running_build()
    for patch in ("0", "99", "0rc1"):
        record = dict(running, tensorflow=f"{major}.{minor}.{patch}")
        _loader.check_build(_library_with_record(tmp_path, record))
    with pytest.raises(_loader.VersionMismatchError):
        record = dict(running, tensorflow=f"{major}.{int(minor) + 1}.0")
        _loader.check_build(_library_with_record(tmp_path, record))


def test_a_library_built_with_another_abi_flag_is_refused(tmp_path):
    running = _loader.running_build()
    other = "0" if running["cxx11_abi"] == "1" else "1"
    library = _library_with_record(tmp_path, dict(running, cxx11_abi=other))
    with pytest.raises(_loader.VersionMismatchError) as raised:
        _loader.check_build(library)
    message = str(raised.value)
    assert f"_GLIBCXX_USE_CXX11_ABI={other}" in message
    assert f"_GLIBCXX_USE_CXX11_ABI={running['cxx11_abi']}" in message
    assert "pip install" in message


@pytest.mark.parametrize("record", [None, "not json", {"tensorflow": "2.21.0"}])
def test_a_library_without_a_readable_build_record_is_refused(tmp_path, record):
    library = _library_with_record(tmp_path, None)
    if record is not None:
        path = _loader.record_path(library)
        path.write_text(record if isinstance(record, str) else json.dumps(record))
    with pytest.raises(_loader.VersionMismatchError, match="cannot tell which TensorFlow"):
        _loader.check_build(library)


def test_the_skip_variable_turns_a_refusal_into_a_warning(tmp_path, monkeypatch):
    library = _library_with_record(tmp_path, dict(_loader.running_build(), tensorflow=OTHER_TF))
    monkeypatch.setenv(_loader.SKIP_VARIABLE, "1")
    with pytest.warns(RuntimeWarning, match=OTHER_TF):
        _loader.check_build(library)


def test_a_tensorflow_outside_the_range_is_refused(monkeypatch):
    monkeypatch.setattr(_loader, "TF_MIN", (2, 99))
    monkeypatch.setattr(_loader, "TF_MAX", (2, 100))
    with pytest.raises(_loader.VersionMismatchError) as raised:
        _loader._check_tf_version()
    assert ">=2.99,<2.100" in str(raised.value) and tf.__version__ in str(raised.value)
    monkeypatch.setenv(_loader.SKIP_VARIABLE, "1")
    with pytest.warns(RuntimeWarning, match="supports TensorFlow"):
        _loader._check_tf_version()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monkeypatch.undo()
        _loader._check_tf_version()  # the running TF: silent


_LOAD = "import sok_lite, tensorflow as tf; sok_lite._loader.ops(); print('loaded')"


def test_a_package_whose_library_was_built_against_another_tensorflow_refuses_to_load(tmp_path):
    """A copy of the package with the real library and a record of another TensorFlow: the
    first op use raises ImportError naming both versions; nothing crashes; the skip variable
    loads it (this one does load: it really was built against the running TF)."""
    copy = tmp_path / "sok_lite"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    record = dict(_loader.running_build(), tensorflow=OTHER_TF)
    _loader.record_path(copy / LIBRARY.name).write_text(json.dumps(record))
    env = {"PYTHONPATH": str(tmp_path), "TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", _LOAD], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 1, done.stderr[-3000:]  # an exception, not a signal
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("sok_lite._loader.VersionMismatchError:"), last
    assert OTHER_TF in last and tf.__version__ in last
    env[_loader.SKIP_VARIABLE] = "1"
    done = subprocess.run(
        [sys.executable, "-c", _LOAD], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.strip() == "loaded", done.stderr[-3000:]
    assert "RuntimeWarning" in done.stderr and OTHER_TF in done.stderr


# The private names: probed at import, each feature failing alone when one has moved.


def test_every_feature_finds_its_private_names():
    pytest.importorskip("tf_keras")
    for feature in FEATURES:  # probes each name; test_package.py checks them one by one
        _tf_internals.require(feature)


def test_the_registry_covers_every_private_module_path_in_the_package():
    used = set()
    for path in PACKAGE.rglob("*.py"):
        used |= set(
            re.findall(
                r"\b(?:tensorflow\.python|keras\.src|tf_keras\.src)[\w.]*\w", path.read_text()
            )
        )
    resolved = {NAMES[n].resolve for n in NAMES} | set(NAMES)
    unregistered = sorted(
        u for u in used if not any(r == u or r.startswith(u + ".") for r in resolved)
    )
    assert not unregistered, unregistered
    assert set(n for names in FEATURES.values() for n in names) == set(NAMES)  # each one is needed


def test_the_docs_list_every_feature_and_name():
    text = (ROOT / "docs" / "install.md").read_text()
    section = text[text.index("## Version checks") :]
    missing = [f for f in FEATURES if f"`{f}`" not in section]
    missing += [n for n in NAMES if f"`{n}`" not in section]
    assert not missing, missing


def _move(monkeypatch, name: str) -> None:
    """Simulates a TF/Keras release in which `name` has moved: its probe now fails."""
    probe = _tf_internals._probe
    moved = "AttributeError: moved in this simulated release"
    monkeypatch.setattr(_tf_internals, "_probe", lambda p: moved if p.name == name else probe(p))
    monkeypatch.setattr(_tf_internals, "_probed", _tf_internals._probed - {name})
    monkeypatch.setattr(_tf_internals, "_missing", {})


def _ids() -> tf.RaggedTensor:
    return tf.ragged.constant([[1, 2], [0]], dtype=tf.int64)


def test_a_moved_loss_scaling_name_fails_loss_scaling_only(monkeypatch):
    _move(monkeypatch, "keras.optimizers.LossScaleOptimizer.check_finite")
    with pytest.raises(MissingInternalError) as raised:
        keras.optimizers.LossScaleOptimizer(sok.keras.OptimizerWrapper(keras.optimizers.SGD(0.1)))
    message = str(raised.value)
    assert "mixed-precision loss scaling" in message
    assert "keras.optimizers.LossScaleOptimizer.check_finite" in message
    assert f"TensorFlow {tf.__version__}" in message and f"keras {keras.__version__}" in message
    assert f">={TF_MIN[0]}.{TF_MIN[1]},<{TF_MAX[0]}.{TF_MAX[1]}" in message
    # Without a LossScaleOptimizer, the same wrapper trains a table.
    table = sok.Variable(np.ones([3, 2], np.float32))
    optimizer = sok.keras.OptimizerWrapper(keras.optimizers.SGD(0.5))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(sok.lookup_sparse(table, _ids()))
    optimizer.apply_gradients([(tape.gradient(loss, table), table)])
    np.testing.assert_allclose(table.numpy(), [[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]])


def test_a_moved_summary_name_fails_keras_hash_tables_only(monkeypatch):
    from sok_lite.keras import _keras_hooks

    monkeypatch.setattr(_keras_hooks, "_installed", set())
    _move(monkeypatch, "keras.src.utils.summary_utils.weight_memory_size")
    with pytest.raises(MissingInternalError, match="summary_utils.weight_memory_size"):
        sok.keras.Embedding(None, 4)(_ids())
    out = sok.keras.Embedding(5, 4)(_ids())  # a static table: no hook needed
    assert out.shape == (2, 4)


def test_a_moved_gradient_name_fails_gradients_only(monkeypatch):
    table = sok.Variable(np.ones([3, 2], np.float32))
    _move(monkeypatch, "tensorflow.python.ops.resource_variable_ops.variable_accessed")
    with pytest.raises(MissingInternalError, match="gradients of lookups"):
        sok.lookup_sparse(table, _ids())
    assert "tensorflow.python.ops.resource_variable_ops.variable_accessed" in _tf_internals.probe()
    np.testing.assert_array_equal(table.numpy(), np.ones([3, 2]))  # tables themselves work


def test_a_moved_handle_data_name_keeps_the_row_checks_of_one_id_lookups(monkeypatch):
    """Without a table's static rows, a traced step checks the rows a one-id lookup's gradient
    hands the optimizer again, as for any other gradient, and trains the same."""
    values = []
    for moved in (False, True):
        if moved:
            _move(monkeypatch, "tensorflow.python.ops.handle_data_util.get_resource_handle_data")
        table = sok.Variable(np.arange(8, dtype=np.float32).reshape(4, 2))
        optimizer = sok.keras.OptimizerWrapper(keras.optimizers.SGD(0.5))
        spec = tf.TensorSpec([None, 1], tf.int64)

        @tf.function(input_signature=[spec])
        def step(x, table=table, optimizer=optimizer):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(sok.lookup_sparse(table, x))
            optimizer.apply_gradients([(tape.gradient(loss, table), table)])

        assert gradient_row_checks(step, spec) == int(moved)
        step(tf.constant([[1], [3], [1]], tf.int64))
        values.append(table.numpy())
    np.testing.assert_array_equal(values[0], values[1])
    assert not np.array_equal(values[0], np.arange(8).reshape(4, 2))


_MOVED_AT_IMPORT = """
import tensorflow as tf
from keras.src.utils import summary_utils
del summary_utils.weight_memory_size  # as if a Keras release had moved it
import numpy as np
import sok_lite as sok
from sok_lite._tf_internals import MissingInternalError, probe
assert list(probe()) == ["keras.src.utils.summary_utils.weight_memory_size"], probe()
table = sok.Variable(np.ones([3, 2], np.float32))
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(sok.lookup_sparse(table, tf.ragged.constant([[1]], dtype=tf.int64)))
assert tape.gradient(loss, table) is not None
try:
    sok.keras.Embedding(None, 4)(tf.ragged.constant([[1]], dtype=tf.int64))
except MissingInternalError as e:
    print("refused:", e)
"""


def test_a_name_missing_at_import_does_not_stop_the_import():
    env = {"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(PACKAGE.parent)}
    done = subprocess.run(
        [sys.executable, "-c", _MOVED_AT_IMPORT], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "refused: sok_lite: hash tables in sok_lite.keras layers" in done.stdout, done.stdout


def test_a_keras_older_than_the_floor_is_refused_naming_both_versions(monkeypatch):
    monkeypatch.setattr(keras, "__version__", "3.0.0")
    with pytest.raises(_loader.VersionMismatchError) as raised:
        _loader.check_keras_version()
    message = str(raised.value)
    floor = f"{KERAS_MIN[0]}.{KERAS_MIN[1]}"
    assert f"Keras >={floor}" in message and "found keras 3.0.0" in message
    assert f"pip install 'keras>={floor}'" in message
    monkeypatch.setenv(_loader.SKIP_VARIABLE, "1")
    with pytest.warns(RuntimeWarning, match="found keras 3.0.0"):
        _loader.check_keras_version()


def test_the_floor_keras_and_newer_pass(monkeypatch):
    for version in (f"{KERAS_MIN[0]}.{KERAS_MIN[1]}.0", "3.99.1", keras.__version__):
        monkeypatch.setattr(keras, "__version__", version)
        _loader.check_keras_version()


def test_the_package_requires_the_keras_floor():
    """The installed metadata (pyproject.toml's dependencies), so pip upgrades an older Keras."""
    requires = importlib.metadata.requires("sok_lite") or []
    assert f"keras>={KERAS_MIN[0]}.{KERAS_MIN[1]}" in requires, requires
