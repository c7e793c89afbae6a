"""Loads the op library once, next to this package, and checks the TensorFlow version."""

import functools
import pathlib
import warnings

import tensorflow as tf

from sok_lite._errors import CleanOps
from sok_lite._tf_range import TF_MAX, TF_MIN


def _check_tf_version() -> None:
    major, minor = (int(x) for x in tf.__version__.split(".")[:2])
    if not TF_MIN <= (major, minor) < TF_MAX:
        warnings.warn(
            f"sok_lite supports TensorFlow >={TF_MIN[0]}.{TF_MIN[1]},<{TF_MAX[0]}.{TF_MAX[1]}; "
            f"found {tf.__version__}. The op library may fail to load or misbehave.",
            RuntimeWarning,
            stacklevel=3,
        )


@functools.cache
def ops():
    """The loaded op module (generated wrappers named sok_lite_*), raising errors without TF's
    eager decoration (sok_lite._errors)."""
    _check_tf_version()
    here = pathlib.Path(__file__).resolve().parent
    candidates = sorted(here.glob("_sok_lite_ops*.so"))
    if not candidates:
        raise ImportError(
            f"sok_lite op library not found in {here}; build it with "
            "`pip install -e . --no-build-isolation` (see docs/install.md)"
        )
    module = tf.load_op_library(str(candidates[0]))
    _load_gpu_kernels(here)
    return CleanOps(module)


def _load_gpu_kernels(here: pathlib.Path) -> None:
    """Adds the DEVICE_GPU kernels (a separate library, built with CUDA) when TF sees a GPU."""
    gpu_library = sorted(here.glob("_sok_lite_gpu_ops*.so"))
    if gpu_library and tf.config.list_physical_devices("GPU"):
        tf.load_op_library(str(gpu_library[0]))
