"""Package hygiene: a silent import, the TF range in one place, the private TF names we use."""

import runpy
import subprocess
import sys

import tensorflow as tf

import sok_lite
from sok_lite import _compat


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


def test_private_tensorflow_names_still_exist():
    assert issubclass(tf.Variable(1.0).__class__, _compat.ResourceVariable)
    v = tf.Variable([[1.0]])
    with tf.GradientTape(watch_accessed_variables=True) as tape:
        _compat.variable_accessed(v)
    assert [w.ref() for w in tape.watched_variables()] == [v.ref()]


def test_public_api():
    expected = {"init", "rank", "num_ranks", "Variable", "lookup_sparse"}
    assert expected <= set(sok_lite.__all__)
    assert sok_lite.rank() == 0 and sok_lite.num_ranks() == 1
