#!/usr/bin/env bash
# Builds kernels/cuda/*.cu into build/gpu/libsok_lite_cuda.so for the ctypes tests in this folder.
#   SOK_LITE_CUDA_ARCH  -arch value (default sm_90)
#   NVCC                compiler (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#   JOBS                parallel compiles (default: the number of cores)
# When a GPU is visible, code for its compute capability is added with -gencode, so the library
# runs natively on it whatever SOK_LITE_CUDA_ARCH says. Every .cu file of kernels/cuda is in the
# library: new kernels need no change here.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
arch="${SOK_LITE_CUDA_ARCH:-sm_90}"
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
out_dir="$root/build/gpu"
obj_dir="$out_dir/obj"
mkdir -p "$obj_dir"

gencode=()
if command -v nvidia-smi >/dev/null 2>&1; then
  cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')"
  if [[ "$cap" =~ ^[0-9]+$ ]]; then
    gencode=(-gencode "arch=compute_${cap},code=sm_${cap}")
  fi
fi

# -fmad=false: no fused multiply-add, so results match the CPU kernels in kernels/core.
flags=(-std=c++17 -O3 -Xcompiler -fPIC -fmad=false -arch="$arch" "${gencode[@]}" -I"$root")
rm -f "$obj_dir"/*.o
export nvcc obj_dir
printf '%s\n' "$root"/kernels/cuda/*.cu |
  xargs -P "$jobs" -I{} bash -c '"$nvcc" "$@" -c {} -o "$obj_dir/$(basename {} .cu).o"' _ "${flags[@]}"
"$nvcc" -shared "${flags[@]}" "$obj_dir"/*.o -o "$out_dir/libsok_lite_cuda.so"
echo "$out_dir/libsok_lite_cuda.so"
