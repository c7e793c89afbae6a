"""Package hygiene: a silent import, the TF range and the version in one place each, the private
TF names we use, and `pip install .` giving a package that works outside the source tree."""

import ast
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import runpy
import subprocess
import sys
import time
import tomllib

import tensorflow as tf

import sok_lite
from sok_lite import _tf_internals

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_import_prints_nothing():
    # TF itself may log while importing; only what sok_lite adds after it counts.
    code = (
        "import sys, tensorflow; sys.stdout.flush(); sys.stderr.flush(); "
        "print('--mark--', flush=True); print('--mark--', file=sys.stderr, flush=True); "
        "import sok_lite; sok_lite._loader.ops()"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.split("--mark--")[-1].strip() == ""
    assert proc.stderr.split("--mark--")[-1].strip() == ""


def test_running_tensorflow_is_in_the_supported_range():
    rng = runpy.run_path(sok_lite._tf_range.__file__)
    version = tuple(int(x) for x in tf.__version__.split(".")[:2])
    assert rng["TF_MIN"] <= version < rng["TF_MAX"]
    assert rng["pip_requirement"]() == (
        f"tensorflow-cpu>={rng['TF_MIN'][0]}.{rng['TF_MIN'][1]},<{rng['TF_MAX'][0]}.{rng['TF_MAX'][1]}"
    )


def test_one_tensorflow_distribution_is_installed():
    # tensorflow and tensorflow-cpu install the same files over each other; tf_keras requires
    # `tensorflow`, so the Makefile installs it without its dependencies.
    providers = importlib.metadata.packages_distributions().get("tensorflow", [])
    assert len(set(providers)) == 1, providers


def test_tensorflow_imports_without_a_cuda_probe_on_a_cpu_machine():
    if tf.config.list_physical_devices("GPU"):
        return  # a GPU machine: cuInit is expected to run, and to succeed
    proc = subprocess.run(
        [sys.executable, "-c", "import tensorflow as tf; tf.constant(1.0) + 1"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "cuInit" not in proc.stderr, proc.stderr


def test_private_tensorflow_names_still_exist():
    # Every registered private name (sok_lite/_tf_internals.py, NAMES) is where sok_lite looks,
    # then what the TensorFlow ones are relied on to do (tests/keras/test_keras_internals.py: the
    # Keras ones).
    tf_keras_imports = importlib.util.find_spec("tf_keras") is not None
    names = [n for n, p in _tf_internals.NAMES.items() if tf_keras_imports or p.owner != "tf_keras"]
    assert _tf_internals.probe(tuple(names)) == {}
    assert issubclass(tf.Variable(1.0).__class__, _tf_internals.ResourceVariable)
    v = tf.Variable([[1.0]])
    with tf.GradientTape(watch_accessed_variables=True) as tape:
        _tf_internals.variable_accessed(v)
    assert [w.ref() for w in tape.watched_variables()] == [v.ref()]
    sok_lite._loader.ops()  # the op library registers its ops when it loads
    assert [a.name for a in _tf_internals.op_def("SokLiteGatherRows").input_arg] == [
        "handles",
        "indices",
    ]
    assert tf.Variable(1.0)._serialize_to_tensors().keys() == {_tf_internals.VARIABLE_VALUE_KEY}


def test_public_api():
    expected = {"init", "rank", "num_ranks", "Variable", "lookup_sparse"}
    assert expected <= set(sok_lite.__all__)
    assert sok_lite.rank() == 0 and sok_lite.num_ranks() == 1


def test_version_has_one_source():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    source = project["tool"]["setuptools"]["dynamic"]["version"]
    assert source == {"attr": "sok_lite._version.__version__"}
    stated = runpy.run_path(str(ROOT / "sok_lite" / "_version.py"))["__version__"]
    assert sok_lite.__version__ == stated
    # The installed metadata (make build) was generated from the same file.
    assert importlib.metadata.version("sok_lite") == stated
    # setup.py passes only the build: no name, version or dependencies of its own.
    tree = ast.parse((ROOT / "setup.py").read_text())
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup"
    ]
    assert len(calls) == 1
    assert {k.arg for k in calls[0].keywords} == {"setup_requires", "ext_modules", "cmdclass"}
    assert f"## [{stated}]" in (ROOT / "CHANGELOG.md").read_text()


_INSTALLED_LOOKUP = """
import importlib.metadata, json
import numpy as np
import tensorflow as tf
import sok_lite as sok

sok.init()
table = sok.Variable(np.arange(12).reshape(4, 3), dtype=tf.float32, name="t")
ids = tf.ragged.constant([[1, 3], [0]], dtype=tf.int64)
(out,) = sok.lookup_sparse([table], [ids], combiners=["sum"])
print(json.dumps({
    "file": sok.__file__,
    "version": sok.__version__,
    "metadata": importlib.metadata.version("sok_lite"),
    "out": out.numpy().tolist(),
}))
"""


def test_pip_install_works_outside_the_source_tree(tmp_path):
    """`pip install .` (the wheel build of pyproject.toml), then one lookup from another directory.

    The install goes to a --target directory read through PYTHONPATH, by the interpreter that runs
    the tests, so the TensorFlow already installed serves both the build and the import and
    nothing is downloaded (--no-index, --no-deps, --no-build-isolation). The build runs in the
    source tree, in the CMake build directory that `make build` uses with the same Python, so the
    op library recompiles only kernels changed since the last build: seconds when none did. The
    timeout allows for a full recompile (about 2 minutes on 2 cores) when they did.
    """
    target = tmp_path / "site"
    bin_dir = str(pathlib.Path(sys.executable).parent)  # the venv's cmake, as the Makefile has
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    env.pop("PYTHONPATH", None)
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps"]
    install += ["--no-build-isolation", "--disable-pip-version-check", "--target", str(target)]
    started = time.monotonic()
    done = subprocess.run(
        install + [str(ROOT)], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stdout[-10000:] + done.stderr[-10000:]
    installed = {p.name for p in target.iterdir()}
    version = sok_lite.__version__
    assert installed == {"sok_lite", f"sok_lite-{version}.dist-info"}, installed
    assert list((target / "sok_lite").glob("_sok_lite_ops*.so"))
    assert (target / "sok_lite" / "py.typed").is_file()  # PEP 561: the annotations ship
    # The TensorFlow the library was built against, which sok_lite checks before loading it.
    record = json.loads((target / "sok_lite" / "_sok_lite_ops.build.json").read_text())
    assert record["tensorflow"] == tf.__version__, record

    env["PYTHONPATH"] = str(target)
    done = subprocess.run(
        [sys.executable, "-c", _INSTALLED_LOOKUP],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-10000:] + done.stderr[-10000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert pathlib.Path(result["file"]).is_relative_to(target), result["file"]
    assert result["version"] == result["metadata"] == version
    assert result["out"] == [[12.0, 14.0, 16.0], [0.0, 1.0, 2.0]]
    print(f"pip install . and one lookup: {time.monotonic() - started:.1f} s")
