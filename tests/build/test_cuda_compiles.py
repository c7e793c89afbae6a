"""kernels/cuda must compile with nvcc (device code for sm_90, no GPU needed), and its host-side
initializer must agree with kernels/core (the hash is one definition, kernels/core/cpu_gpu_rules.h).

Skipped where nvcc is absent. One nvcc call for all files keeps it well under a minute.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CUDA_SOURCES = sorted((ROOT / "kernels" / "cuda").glob("*.cu"))


def find_nvcc():
    candidates = [os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    return next((c for c in candidates if c and Path(c).exists()), None)


@pytest.fixture(scope="module")
def nvcc():
    found = find_nvcc()
    if found is None:
        pytest.skip("nvcc not found")
    return found


def test_cuda_sources_compile(nvcc, tmp_path):
    assert CUDA_SOURCES, "no kernels/cuda/*.cu"
    arch = os.environ.get("SOK_LITE_CUDA_ARCH", "sm_90")
    cmd = [nvcc, "-std=c++17", "-c", f"-arch={arch}", "-fmad=false", "-Werror", "all-warnings"]
    cmd += ["-Xcompiler", "-fPIC,-Wall", f"-I{ROOT}", "-odir", str(tmp_path)]
    result = subprocess.run(
        cmd + [str(s) for s in CUDA_SOURCES], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    objects = sorted(p.stem for p in tmp_path.glob("*.o"))
    assert objects == sorted(s.stem for s in CUDA_SOURCES)


def test_device_init_agrees_with_core(nvcc, tmp_path):
    """Initial rows of dynamic-table keys must not depend on the device."""
    program = tmp_path / "agree"
    cmd = [nvcc, "-std=c++17", "-O2", f"-I{ROOT}", "-o", str(program)]
    cmd += [str(ROOT / "tests/gpu/agree_with_core.cu"), str(ROOT / "kernels/core/row_init.cc")]
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stdout + built.stderr
    ran = subprocess.run([str(program)], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
