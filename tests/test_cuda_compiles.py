"""kernels/cuda/*.cu must compile with nvcc (device code for sm_90, no GPU needed).

Skipped where nvcc is absent. One nvcc call for all files keeps it well under a minute.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CUDA_SOURCES = sorted((ROOT / "kernels" / "cuda").glob("*.cu"))


def find_nvcc():
    candidates = [os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    return next((c for c in candidates if c and Path(c).exists()), None)


def test_cuda_sources_compile(tmp_path):
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
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
