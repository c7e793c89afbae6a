// Host-side check that the device initializer in kernels/cuda equals kernels/core to the float
// (initial rows): compiled by nvcc as host code and linked with kernels/core/row_init.cc by
// tests/test_cuda_compiles.py (no GPU needed). The hash and owner rules need no such check: both
// sides call kernels/core/cpu_gpu_rules.h. Prints nothing on success; exits 1 after listing
// mismatches.
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/core/row_init.h"
#include "kernels/cuda/row_init.cuh"

int main() {
  const int64_t keys[] = {INT64_MIN, INT64_MIN + 1, -1, 0, 1, 2, 17, 12345678901LL, INT64_MAX};
  int failures = 0;
  const int64_t dim = 37;
  const int kinds[] = {SOK_LITE_CUDA_INIT_NORMAL, SOK_LITE_CUDA_INIT_TRUNCATED_NORMAL,
                       SOK_LITE_CUDA_INIT_UNIFORM, SOK_LITE_CUDA_INIT_CONSTANT};
  for (int kind : kinds) {
    sok_lite::RowInit core;
    core.kind = static_cast<sok_lite::InitKind>(kind);
    core.seed = 20261129;
    core.a = -0.25;
    core.b = 0.75;
    const SokLiteCudaRowInit gpu = {kind, core.seed, core.a, core.b};
    const int64_t n = sizeof(keys) / sizeof(keys[0]);
    std::vector<float> expected(n * dim);
    sok_lite::InitRows(core, keys, dim, 0, n, expected.data());
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < dim; ++c) {
        const float got = sok_lite::cuda::InitValue(gpu, keys[i], c);
        if (std::memcmp(&got, &expected[i * dim + c], sizeof(float)) != 0) {
          std::printf("init kind %d key %lld col %lld: %.9g vs %.9g\n", kind,
                      static_cast<long long>(keys[i]), static_cast<long long>(c), got,
                      expected[i * dim + c]);
          ++failures;
        }
      }
    }
  }
  return failures == 0 ? 0 : 1;
}
