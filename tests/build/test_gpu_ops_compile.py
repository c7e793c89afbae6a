"""The GPU op library (kernels/tf_gpu + kernels/cuda) must build with CMake against the installed
TF headers, and load next to the CPU library (its kernels register for DEVICE_GPU even where TF
has no GPU). No GPU is needed; skipped where nvcc or cmake is absent.

The build goes to a temporary directory with at most 2 parallel jobs and builds only the
sok_lite_gpu_ops target: the CPU library in sok_lite/ is never touched.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def find_nvcc():
    candidates = [os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    return next((c for c in candidates if c and Path(c).exists()), None)


@pytest.fixture(scope="module")
def gpu_library(tmp_path_factory):
    nvcc = find_nvcc()
    if nvcc is None or shutil.which("cmake") is None:
        pytest.skip("nvcc or cmake not found")
    build = tmp_path_factory.mktemp("gpu_ops")
    configure = [
        "cmake",
        "-S",
        str(ROOT),
        "-B",
        str(build),
        f"-DPython3_EXECUTABLE={sys.executable}",
        f"-DCMAKE_CUDA_COMPILER={nvcc}",
        "-DSOK_LITE_WITH_CUDA=ON",
        "-DCMAKE_BUILD_TYPE=Release",
    ]
    done = subprocess.run(configure, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    compile_cmd = ["cmake", "--build", str(build), "--target", "sok_lite_gpu_ops", "-j", "2"]
    done = subprocess.run(compile_cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-20000:] + done.stderr[-20000:]
    library = build / "_sok_lite_gpu_ops.so"
    assert library.exists()
    return library


def test_gpu_library_builds_without_touching_the_cpu_library(gpu_library):
    assert gpu_library.stat().st_size > 0
    assert not list((ROOT / "sok_lite").glob("_sok_lite_gpu_ops*.so"))


def test_gpu_library_loads_after_the_cpu_library(gpu_library):
    """Every TF symbol resolves and the DEVICE_GPU registrations match registered ops."""
    script = (
        "import tensorflow as tf\n"
        "from sok_lite._loader import ops\n"
        "ops()\n"
        f"tf.load_op_library({str(gpu_library)!r})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-5000:]


GPU_OPS = {
    "SokLiteRowSplitsFromRowIds": {"row_ids", "nrows", "row_splits"},
    "SokLiteUniqueIds": set(),
    "SokLiteGatherRows": set(),
    "SokLiteSegmentCombine": set(),
    "SokLiteSegmentCombineGrad": {"num_unique"},
    "SokLiteSparseApply": {"hyper", "step"},
    "SokLiteInitRows": set(),
    "SokLitePartitionByOwner": set(),
    "SokLiteGatherForPeers": {"splits", "vector_splits"},
    "SokLiteUnpackRows": {"counts"},
    "SokLitePackRows": {"counts"},
    "SokLiteReduceForOwner": {"splits"},
    "SokLiteDynamicTable": set(),
    "SokLiteDynamicLookup": set(),
    "SokLiteDynamicApply": {"hyper", "step"},
    "SokLiteDynamicExport": {"since_step"},
    "SokLiteDynamicAssign": {"step"},
    "SokLiteDynamicSize": set(),
    "SokLiteDynamicEvict": {"steps_unseen", "evicted"},
    "SokLiteDynamicClear": set(),
}

# CPU-only ops: lookup_sparse uses SokLiteDynamicLookupCombine for a hash table on the CPU only
# (a GPU table takes UniqueIds + DynamicLookup + SegmentCombine, see docs/gpu.md). The disk
# tier's piecewise export and the memory counters: DynamicVariable exports a GPU table whole and
# reports its size only. A load swaps a staged table into a host table only (a GPU table is
# restored in place, its previous rows kept in host memory: sok_lite/tables/staging.py). A whole
# assign into a new buffer advised for huge pages is for host tables (a GPU table takes TF's), and
# so is a disk tier's prefetch of the next batch's rows.
CPU_ONLY_OPS = {
    "SokLiteAssignTable",
    "SokLiteDynamicPrefetch",
    "SokLiteDynamicLookupCombine",
    "SokLiteDynamicExportRange",
    "SokLiteDynamicMemoryStats",
    "SokLiteDynamicSwapRows",
}


def test_gpu_kernels_are_registered_with_their_host_memory_args(gpu_library):
    """Each op but the CPU-only ones has one DEVICE_GPU kernel; its host-memory names are
    arguments of the op (TF only checks them when it first builds the kernel, which needs a
    GPU)."""
    script = (
        "import json\n"
        "import tensorflow as tf\n"
        "from tensorflow.python.framework import kernels, op_def_registry\n"
        "from sok_lite._loader import ops\n"
        "ops()\n"
        f"tf.load_op_library({str(gpu_library)!r})\n"
        f"names = {sorted(set(GPU_OPS) | CPU_ONLY_OPS)!r}\n"
        "found = {}\n"
        "for name in names:\n"
        "    op = op_def_registry.get(name)\n"
        "    args = {a.name for a in list(op.input_arg) + list(op.output_arg)}\n"
        "    gpu = [k for k in kernels.get_registered_kernels_for_op(name).kernel\n"
        "           if k.device_type == 'GPU']\n"
        "    found[name] = [sorted(k.host_memory_arg) for k in gpu]\n"
        "    found[name + ':args'] = sorted(args)\n"
        "found['all ops'] = sorted(n for n in dir(ops()) if n.startswith('sok_lite_')\n"
        "                          and not n.endswith('_eager_fallback'))\n"
        "print(json.dumps(found))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-5000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for name, host_args in GPU_OPS.items():
        assert found[name] == [sorted(host_args)], name
        assert host_args <= set(found[name + ":args"]), name
    for name in CPU_ONLY_OPS:
        assert found[name] == [], name
    snake = sorted(
        re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower() for name in set(GPU_OPS) | CPU_ONLY_OPS
    )
    assert found["all ops"] == snake, "every op needs a GPU kernel or a CPU_ONLY_OPS entry"
