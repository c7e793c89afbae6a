"""Builds sok_lite: a Python package plus one TensorFlow op library compiled with CMake."""

import os
import pathlib
import runpy
import shutil
import subprocess
import sys

from setuptools import Extension, find_packages, setup
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


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        target = pathlib.Path(self.get_ext_fullpath(ext.name)).resolve()
        build_dir = ROOT / "build" / f"cmake-py{sys.version_info[0]}{sys.version_info[1]}"
        if ext.name == "sok_lite._sok_lite_ops":  # one CMake build makes every library
            build_dir.mkdir(parents=True, exist_ok=True)
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
        # A new file renamed over the old one: processes that have the old library loaded keep
        # their mapping instead of seeing it rewritten under them.
        staged = target.with_name(target.name + ".new")
        shutil.copyfile(build_dir / BUILT_LIBRARY[ext.name], staged)
        os.replace(staged, target)


def _cuda_requested() -> bool:
    """SOK_LITE_WITH_CUDA=ON also builds and installs the GPU kernels (docs/gpu.md)."""
    return os.environ.get("SOK_LITE_WITH_CUDA", "").upper() in ("1", "ON", "TRUE", "YES")


setup(
    name="sok_lite",
    version="0.1.0",
    description="Sharded, sparse and dynamic embedding tables for TensorFlow/Keras",
    packages=find_packages(include=["sok_lite", "sok_lite.*"]),
    python_requires=">=3.10",
    install_requires=["numpy"],
    # Only for isolated builds (plain `pip install .`): the build needs TF headers. An environment
    # that already has TensorFlow (GPU or CPU wheel) builds against it.
    setup_requires=[] if _tensorflow_importable() else [_tf_requirement(), "cmake>=3.18,<4"],
    ext_modules=[
        CMakeExtension(name) for name in BUILT_LIBRARY if _cuda_requested() or "gpu" not in name
    ],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
