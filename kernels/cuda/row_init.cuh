// Deterministic initial row values (kernels/core/row_init.cc), callable on host and device: the
// value of (seed, id, column) is the draw of kernels/core/cpu_gpu_rules.h, as on the CPU, so a
// dynamic-table key created on a GPU starts from the same row as on a CPU.
#ifndef SOK_LITE_KERNELS_CUDA_ROW_INIT_CUH_
#define SOK_LITE_KERNELS_CUDA_ROW_INIT_CUH_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/core/cpu_gpu_rules.h"
#include "kernels/cuda/sok_lite_cuda.h"

namespace sok_lite {
namespace cuda {

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
