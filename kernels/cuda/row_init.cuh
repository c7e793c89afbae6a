// Deterministic initial row values (kernels/core/row_init.cc), callable on host and device: the
// value of (seed, id, column) is the same counter-based draw as on the CPU, so a dynamic-table
// key created on a GPU starts from the same row as on a CPU. The integer part is bit-identical;
// the double log / cos / sqrt of Box-Muller may differ from the host's by an ulp, which the cast
// to float almost always absorbs.
#ifndef SOK_LITE_KERNELS_CUDA_ROW_INIT_CUH_
#define SOK_LITE_KERNELS_CUDA_ROW_INIT_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/hashing.cuh"
#include "kernels/cuda/sok_lite_cuda.h"

namespace sok_lite {
namespace cuda {

// A uniform double in (0, 1) from (seed, id, column, draw).
__host__ __device__ __forceinline__ double InitUniform(uint64_t seed, int64_t id, int64_t col,
                                                       uint64_t draw) {
  const uint64_t h = SplitMix(SplitMix(SplitMix(seed) ^ static_cast<uint64_t>(id)) ^
                              (static_cast<uint64_t>(col) * 0x100000001b3ULL) ^ (draw << 40));
  return (static_cast<double>(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Standard normal by Box-Muller from two uniforms of the same cell.
__host__ __device__ __forceinline__ double InitNormal(uint64_t seed, int64_t id, int64_t col,
                                                      uint64_t draw) {
  const double u1 = InitUniform(seed, id, col, 2 * draw);
  const double u2 = InitUniform(seed, id, col, 2 * draw + 1);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

// The initial value of column `col` of row `id`.
__host__ __device__ __forceinline__ float InitValue(const SokLiteCudaRowInit& init, int64_t id,
                                                    int64_t col) {
  double v = init.a;
  switch (init.kind) {
    case SOK_LITE_CUDA_INIT_NORMAL:
      v = init.a + init.b * InitNormal(init.seed, id, col, 0);
      break;
    case SOK_LITE_CUDA_INIT_TRUNCATED_NORMAL: {
      // Redraw beyond two standard deviations, as the CPU code (and Keras) do.
      double z = InitNormal(init.seed, id, col, 0);
      for (uint64_t draw = 1; fabs(z) > 2.0; ++draw) z = InitNormal(init.seed, id, col, draw);
      v = init.a + init.b * z;
      break;
    }
    case SOK_LITE_CUDA_INIT_UNIFORM:
      v = init.a + (init.b - init.a) * InitUniform(init.seed, id, col, 0);
      break;
    default:  // constant
      break;
  }
  return static_cast<float>(v);
}

}  // namespace cuda
}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CUDA_ROW_INIT_CUH_
