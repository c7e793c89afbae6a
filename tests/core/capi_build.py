"""Builds the C ABI shims of tests/core (core_capi.cc, tier_capi.cc) over kernels/core with the
system C++ compiler and binds them with ctypes, so that kernels/core is tested without
TensorFlow. An error result ([[nodiscard]]) left unused fails the build here too.
"""

import ctypes
import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLAGS = ["-O2", "-std=c++17", "-shared", "-fPIC", "-Wall", "-Werror=unused-result"]
FLAGS += ["-Wl,--no-undefined"]  # every kernels/core source the shim needs is listed


def find_cxx():
    candidates = [os.environ.get("CXX"), shutil.which("g++"), shutil.which("c++")]
    return next((c for c in candidates if c and shutil.which(c)), None)


def build(out_dir, shim: str, core_sources, defines=()) -> Path:
    """tests/core/<shim> and kernels/core/<core_sources> as out_dir/lib<shim's stem>.so. Skips the
    calling test where no C++ compiler exists."""
    cxx = find_cxx()
    if cxx is None:
        pytest.skip("no C++ compiler")
    lib = Path(out_dir) / f"lib{Path(shim).stem}.so"
    sources = [ROOT / "tests" / "core" / shim] + [
        ROOT / "kernels" / "core" / s for s in core_sources
    ]
    cmd = [cxx, *FLAGS, f"-I{ROOT}", "-o", str(lib)] + [f"-D{d}" for d in defines]
    built = subprocess.run(cmd + [str(s) for s in sources], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    return lib


def bind(lib, signatures) -> ctypes.CDLL:
    """The library at `lib`, its functions typed from {name: (restype, argtypes)}."""
    dll = ctypes.CDLL(str(lib))
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(dll, name)
        fn.restype, fn.argtypes = restype, argtypes
    return dll


def load_key_hash():
    """sok_lite/tables/key_hash.py, the NumPy mirror of the key hash and rounding draws, by path:
    `import sok_lite.tables.key_hash` would run sok_lite/__init__.py, which imports TF."""
    spec = importlib.util.spec_from_file_location(
        "key_hash", ROOT / "sok_lite" / "tables" / "key_hash.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
