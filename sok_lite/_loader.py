"""Loads the op library once, next to this package, after checking that the running TensorFlow
is one it supports and the one the library was built against.

The build writes a record next to each library, `<library>.build.json` (CMakeLists.txt): the
`tf.__version__` and the `_GLIBCXX_USE_CXX11_ABI` flag it compiled against. The record is read
as a plain file before `tf.load_op_library`, because loading a library built against another
TensorFlow is what fails (undefined symbols) or crashes; reading a version out of the library
itself would mean loading it. Importing this module (sok_lite/__init__.py does it first) also
refuses a Keras older than sok_lite's floor. SOK_LITE_SKIP_VERSION_CHECK=1 turns each check into
a warning (docs/install.md, "Version checks").
"""

import functools
import json
import os
import pathlib
import warnings

import tensorflow as tf

from sok_lite._errors import CleanOps
from sok_lite._tf_range import KERAS_MIN, TF_MAX, TF_MIN, keras_requirement

SKIP_VARIABLE = "SOK_LITE_SKIP_VERSION_CHECK"
REBUILD = (
    "Rebuild it against the running TensorFlow, from the sok_lite source tree: "
    "`pip install --no-build-isolation --no-deps --force-reinstall .` (or `make build` in a "
    "development checkout); see docs/install.md."
)


class VersionMismatchError(ImportError):
    """The running TensorFlow is outside sok_lite's range, or not the one its op library was
    built against."""


def _refuse(message: str) -> None:
    if os.environ.get(SKIP_VARIABLE, "") == "1":
        warnings.warn(f"{message} ({SKIP_VARIABLE}=1: loading anyway)", RuntimeWarning, 4)
        return
    raise VersionMismatchError(
        f"{message} Set {SKIP_VARIABLE}=1 to load it anyway, at your own risk."
    )


def _check_tf_version() -> None:
    major, minor = (int(x) for x in tf.__version__.split(".")[:2])
    if not TF_MIN <= (major, minor) < TF_MAX:
        _refuse(
            f"sok_lite supports TensorFlow >={TF_MIN[0]}.{TF_MIN[1]},<{TF_MAX[0]}.{TF_MAX[1]} "
            f"(sok_lite/_tf_range.py); found {tf.__version__}."
        )


def check_keras_version() -> None:
    """Refuses a Keras older than sok_lite's floor (checked when sok_lite is imported)."""
    import keras

    version = keras.__version__
    if tuple(int(x) for x in version.split(".")[:2]) < KERAS_MIN:
        _refuse(
            f"sok_lite needs Keras >={KERAS_MIN[0]}.{KERAS_MIN[1]} (sok_lite/_tf_range.py); "
            f"found keras {version}, which TensorFlow {tf.__version__} accepts but sok_lite's "
            f"Keras layers, optimizers and saved files do not work with. Upgrade it: "
            f"`pip install '{keras_requirement()}'`."
        )


def running_build() -> dict[str, str]:
    """What a library built now would record: this TensorFlow's version and ABI flag."""
    abi = ""
    for flag in tf.sysconfig.get_compile_flags():
        if flag.startswith("-D_GLIBCXX_USE_CXX11_ABI="):
            abi = flag.partition("=")[2]
    return {"tensorflow": tf.__version__, "cxx11_abi": abi}


def record_path(library: pathlib.Path) -> pathlib.Path:
    """The build record of `library`: _sok_lite_ops.build.json for _sok_lite_ops*.so."""
    return library.with_name(library.name.split(".")[0] + ".build.json")


def _minor(version: str) -> str:
    """'2.21' of '2.21.3' or '2.21.0rc1': TensorFlow keeps its C++ ABI within a minor, and its
    patch releases are built from the same headers, so a patch upgrade needs no rebuild."""
    return ".".join(version.split(".")[:2])


def check_build(library: pathlib.Path) -> None:
    """Refuses `library` unless its build record names the running TensorFlow minor and ABI
    flag."""
    path = record_path(library)
    try:
        record = json.loads(path.read_text())
        built = {key: str(record[key]) for key in ("tensorflow", "cxx11_abi")}
    except (OSError, ValueError, KeyError, TypeError) as e:
        _refuse(
            f"sok_lite cannot tell which TensorFlow its op library {library.name} was built "
            f"against: its build record {path} is missing or unreadable ({type(e).__name__}: "
            f"{e}). {REBUILD}"
        )
        return
    running = running_build()
    if _minor(built["tensorflow"]) != _minor(running["tensorflow"]):
        _refuse(
            f"sok_lite's op library {library.name} was built against TensorFlow "
            f"{built['tensorflow']}, but TensorFlow {running['tensorflow']} is running. {REBUILD}"
        )
    elif built["cxx11_abi"] != running["cxx11_abi"]:
        _refuse(
            f"sok_lite's op library {library.name} was built with _GLIBCXX_USE_CXX11_ABI="
            f"{built['cxx11_abi']} (TensorFlow {built['tensorflow']}), but the running "
            f"TensorFlow {running['tensorflow']} uses _GLIBCXX_USE_CXX11_ABI="
            f"{running['cxx11_abi']}. {REBUILD}"
        )


@functools.cache
def ops() -> CleanOps:
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
    check_build(candidates[0])
    module = tf.load_op_library(str(candidates[0]))
    _load_gpu_kernels(here)
    return CleanOps(module)


def _load_gpu_kernels(here: pathlib.Path) -> None:
    """Adds the DEVICE_GPU kernels (a separate library, built with CUDA) when TF sees a GPU."""
    gpu_library = sorted(here.glob("_sok_lite_gpu_ops*.so"))
    if gpu_library and tf.config.list_physical_devices("GPU"):
        check_build(gpu_library[0])
        tf.load_op_library(str(gpu_library[0]))


check_keras_version()  # at import: before a layer or an optimizer fails in an older Keras
