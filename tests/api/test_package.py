"""Package hygiene: a silent import, the TF range in one place, the private TF names we use."""

import importlib.metadata
import runpy
import subprocess
import sys

import tensorflow as tf

import sok_lite
from sok_lite import _tf_internals


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
