"""Builds sok_lite's TensorFlow op library with CMake.

The package's metadata (name, version, dependencies, packages) is in pyproject.toml; this file
holds only what that cannot state: the CMake extension build and the build requirements that
depend on whether TensorFlow is already importable.
"""

import fcntl
import os
import pathlib
import runpy
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent


def _tf_requirement() -> str:
    """The TensorFlow range, from the one file that states it (run alone: no TF import)."""
    return runpy.run_path(str(ROOT / "sok_lite" / "_tf_range.py"))["pip_requirement"]()


def _tensorflow_importable() -> bool:
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        return False
    return True


class CMakeExtension(Extension):
    def __init__(self, name: str):
        super().__init__(name, sources=[])


# The library each extension module is, in the CMake build directory.
BUILT_LIBRARY = {
    "sok_lite._sok_lite_ops": "_sok_lite_ops.so",
    "sok_lite._sok_lite_gpu_ops": "_sok_lite_gpu_ops.so",  # with SOK_LITE_WITH_CUDA=ON
}


def _build_dir() -> pathlib.Path:
    return ROOT / "build" / f"cmake-py{sys.version_info[0]}{sys.version_info[1]}"


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        target = pathlib.Path(self.get_ext_fullpath(ext.name)).resolve()
        build_dir = _build_dir()
        build_dir.mkdir(parents=True, exist_ok=True)
        # The editable install and `pip install .` share this build directory (both build in the
        # source tree), so an installation recompiles only what changed; the lock keeps two
        # builds from running in it at once.
        with open(build_dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if ext.name == "sok_lite._sok_lite_ops":  # one CMake build makes every library
                subprocess.check_call(
                    [
                        "cmake",
                        "-S",
                        str(ROOT),
                        "-B",
                        str(build_dir),
                        f"-DPython3_EXECUTABLE={sys.executable}",
                        "-DCMAKE_BUILD_TYPE=Release",
                    ]
                )
                jobs = str(os.cpu_count() or 2)
                subprocess.check_call(["cmake", "--build", str(build_dir), "--parallel", jobs])
            target.parent.mkdir(parents=True, exist_ok=True)
            # A new file renamed over the old one: processes that have the old library loaded
            # keep their mapping instead of seeing it rewritten under them.
            staged = target.with_name(target.name + ".new")
            shutil.copyfile(build_dir / BUILT_LIBRARY[ext.name], staged)
            os.replace(staged, target)
            _copy_record(ext, target)

    def run(self) -> None:
        super().run()
        if self.inplace:  # editable install: the libraries were copied into the source tree
            for ext in self.extensions:
                _copy_record(ext, pathlib.Path(self.get_ext_fullpath(ext.name)).resolve())


def _copy_record(ext: Extension, target: pathlib.Path) -> None:
    """Puts the library's build record next to it: the TensorFlow it was built against, which
    sok_lite/_loader.py checks before loading it (CMakeLists.txt writes it; package data)."""
    record = BUILT_LIBRARY[ext.name].replace(".so", ".build.json")
    shutil.copyfile(_build_dir() / record, target.with_name(record))


def _cuda_requested() -> bool:
    """SOK_LITE_WITH_CUDA=ON also builds and installs the GPU kernels (docs/gpu.md)."""
    return os.environ.get("SOK_LITE_WITH_CUDA", "").upper() in ("1", "ON", "TRUE", "YES")


setup(
    # Only for isolated builds (plain `pip install .`): the build needs TF headers. An environment
    # that already has TensorFlow (GPU or CPU wheel) builds against it.
    setup_requires=[] if _tensorflow_importable() else [_tf_requirement(), "cmake>=3.18,<4"],
    ext_modules=[
        CMakeExtension(name) for name in BUILT_LIBRARY if _cuda_requested() or "gpu" not in name
    ],
    cmdclass={"build_ext": CMakeBuild},
)
