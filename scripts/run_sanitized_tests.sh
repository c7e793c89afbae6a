#!/usr/bin/env bash
# Runs the single-process test suite against the ASan + UBSan op library of
# scripts/build_sanitized.sh (built or brought up to date first).
#
# The package is copied to a temporary directory with the sanitized library in place of the
# regular one, and that copy comes first on PYTHONPATH; pytest runs in that directory (under
# `python -P`), so neither pytest nor the interpreters that tests start with `python -c` load the
# checkout's own sok_lite/. Sanitizer reports of the pytest process are written to
# build/sanitize/logs and printed at the end (any report fails the run); the op fuzzer's child
# processes print theirs on their stderr, which the failing test shows.
#
# Usage: scripts/run_sanitized_tests.sh [pytest args...]   (default: tests/ but distributed)
# Environment: PYTHON (default .venv/bin/python), SANITIZE_BUILD_DIR, SKIP_BUILD=1.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
build_dir="$(realpath -m "${SANITIZE_BUILD_DIR:-$root/build/sanitize}")"
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  SANITIZE_BUILD_DIR="$build_dir" PYTHON="$python" "$root/scripts/build_sanitized.sh" >/dev/null
fi
lib="$build_dir/_sok_lite_ops.so"
[[ -f "$lib" ]] || { echo "no sanitized library at $lib" >&2; exit 2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$root/sok_lite" "$work/sok_lite"
find "$work/sok_lite" \( -name '_sok_lite_ops*.so' -o -name __pycache__ \) -prune -exec rm -rf {} +
cp "$lib" "$work/sok_lite/_sok_lite_ops.so"
# The TensorFlow it was built against, which sok_lite checks before loading it.
cp "$build_dir/_sok_lite_ops.build.json" "$work/sok_lite/_sok_lite_ops.build.json"

logs="$build_dir/logs"
rm -rf "$logs"
mkdir -p "$logs"
# The ASan runtime must be loaded before anything else: python itself is not instrumented.
# libstdc++ right after it, or ASan cannot intercept __cxa_throw (python does not link libstdc++,
# TF loads it later) and aborts at the first C++ exception.
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so.6)"
export LD_PRELOAD
# detect_leaks=0: CPython and TF keep allocations alive until exit by design.
# allocator_may_return_null=1: a huge allocation fails as with TF's allocator (the op then
# returns ResourceExhausted) instead of aborting the process.
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:log_path=$logs/asan"
export UBSAN_OPTIONS="print_stacktrace=1:log_path=$logs/ubsan"
export PYTHONPATH="$work:$root${PYTHONPATH:+:$PYTHONPATH}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"

# Tests start child interpreters with `python -c`, which puts the current directory first on
# sys.path, some with PYTHONPATH set to the checkout (test_checkpoint.py's killed dump): run from
# the copy's directory so that those children load the sanitized library too.
[[ "$python" != */* ]] || python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"
args=()
for arg in "$@"; do  # paths given relative to where the script was called from
  if [[ "$arg" != -* && "$arg" != /* && -e "${arg%%::*}" ]]; then arg="$PWD/$arg"; fi
  args+=("$arg")
done
set -- ${args[@]+"${args[@]}"}
cd "$work"
# Check that the copy, not the checkout, is what `import sok_lite` finds, in pytest's process
# and in such a child.
find_origin='import importlib.util as u; print(u.find_spec("sok_lite").origin)'
for origin in "$("$python" -P -c "$find_origin")" "$(PYTHONPATH="$root" "$python" -c "$find_origin")"; do
  [[ "$origin" == "$work/"* ]] || { echo "sok_lite resolves to $origin, not the copy" >&2; exit 2; }
done

# Without arguments: the single-process tests. The CUDA compile checks are always left out: nvcc
# crashes with the ASan runtime preloaded, and they do not load the CPU op library's kernels.
if [[ $# -eq 0 ]]; then
  set -- "$root/tests" --ignore="$root/tests/distributed"
fi
status=0
"$python" -P -m pytest -p no:cacheprovider --rootdir="$root" \
  --ignore="$root/tests/build/test_cuda_compiles.py" --ignore="$root/tests/build/test_gpu_ops_compile.py" \
  "$@" || status=$?

if compgen -G "$logs/*" >/dev/null; then
  echo "=== sanitizer reports (also in $logs) ==="
  cat "$logs"/*
  status=1
fi
exit "$status"
