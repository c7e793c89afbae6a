#!/usr/bin/env bash
# Builds the op library with AddressSanitizer + UndefinedBehaviorSanitizer from the same
# CMakeLists.txt, into its own build directory (default build/sanitize). The library the package
# loads (sok_lite/_sok_lite_ops*.so) is never touched; scripts/run_sanitized_tests.sh runs the
# tests against this one. Prints the path of the built library on its last line.
#
# Environment: PYTHON (default .venv/bin/python), SANITIZE_BUILD_DIR, JOBS (default 2).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
build_dir="${SANITIZE_BUILD_DIR:-$root/build/sanitize}"
jobs="${JOBS:-2}"
# The venv's CMake (< 4, as the Makefile uses) when there is one.
cmake_bin="$(dirname "$python")/cmake"
[[ -x "$cmake_bin" ]] || cmake_bin=cmake

# -fno-omit-frame-pointer and -g give readable sanitizer stacks. CMakeLists.txt appends -O3 after
# these flags; ASan and UBSan work at any optimization level. Left out of UBSan: vptr (TF's
# classes get their type info from the uninstrumented libtensorflow_framework) and the null /
# nonnull checks, which make GCC 12 reject constexpr code in absl's headers (a null dereference
# still shows up as an ASan SEGV report with its stack).
san="-fsanitize=address,undefined"
san+=" -fno-sanitize=vptr,null,nonnull-attribute,returns-nonnull-attribute"
cxx_flags="$san -fno-omit-frame-pointer -g"

"$cmake_bin" -S "$root" -B "$build_dir" \
  -DPython3_EXECUTABLE="$python" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="$cxx_flags" \
  -DCMAKE_SHARED_LINKER_FLAGS="$san" >&2
"$cmake_bin" --build "$build_dir" --parallel "$jobs" >&2
echo "$build_dir/_sok_lite_ops.so"
