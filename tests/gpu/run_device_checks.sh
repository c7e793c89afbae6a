#!/usr/bin/env bash
# The whole GPU check in one pass: build the harness library, run the kernel tests, run the
# benchmark (combine GB/s against copy bandwidth, hash-table keys/s), then the kernel tests
# again under compute-sanitizer's memcheck (out-of-bounds and misaligned accesses, failed
# launches) where that tool exists. Logs and a summary go to $OUT
# (default ./gpu_report). Each step has its own time limit (60 + 60 + 90 + 90 s) so the pass
# ends within 5 minutes; the exit status is non-zero if any step failed.
#   PYTHON    interpreter with CuPy, NumPy and pytest (default python3)
#   SANITIZE  0 to skip the memcheck step
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${OUT:-./gpu_report}"
py="${PYTHON:-python3}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$root"

summary="$out/summary.txt"
: >"$summary"
failed=0

step() {  # step NAME LIMIT_S LOG COMMAND...
  local name="$1" limit="$2" log="$3"
  shift 3
  local start=$SECONDS rc=0
  timeout "$limit" "$@" >"$log" 2>&1 || rc=$?
  echo "$name: rc=$rc ($((SECONDS - start)) s, log: $(basename "$log"))" | tee -a "$summary"
  [[ $rc -eq 0 ]] || failed=1
  return $rc
}

{
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv || true
  "${NVCC:-nvcc}" --version || true
  "$py" -c "import cupy, numpy; print('cupy', cupy.__version__, 'numpy', numpy.__version__)" || true
} >"$out/environment.txt" 2>&1

# Every test module of this folder: a new one needs no change here.
tests=(tests/gpu/test_cuda_*.py)
if step build 60 "$out/build.log" bash tests/gpu/build_harness.sh; then
  step tests 60 "$out/tests.log" "$py" -m pytest -q -rs -p no:cacheprovider \
    --junitxml="$out/junit.xml" "${tests[@]}"
  step bench 90 "$out/bench.log" "$py" tests/gpu/bench_cuda_kernels.py --json "$out/bench.json"
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  if [[ "${SANITIZE:-1}" != 0 && -x "$sanitizer" ]]; then
    # No CuPy memory pool here (see gpu_lib.load), so each array is its own allocation.
    step memcheck 90 "$out/memcheck.log" env SOK_LITE_CUPY_POOL=0 "$sanitizer" \
      --tool memcheck --error-exitcode 1 --print-limit 20 \
      "$py" -m pytest -q -p no:cacheprovider "${tests[@]}"
  fi
fi

for log in tests bench memcheck; do
  if [[ -f "$out/$log.log" ]]; then
    { echo; echo "== $log (tail)"; tail -n 25 "$out/$log.log"; } >>"$summary"
  fi
done
echo "report: $out"
exit $failed
