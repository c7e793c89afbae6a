// Deterministic row initialization (core InitRows) on the GPU: one thread per (row, column)
// value, each a pure function of (seed, id, column).
#include "kernels/cuda/launch_config.cuh"
#include "kernels/cuda/row_init.cuh"
#include "kernels/cuda/sok_lite_cuda.h"

namespace sok_lite {
namespace cuda {
namespace {

__global__ void InitRowsKernel(SokLiteCudaRowInit init, const int64_t* __restrict__ ids, int64_t n,
                               int64_t dim, float* __restrict__ out) {
  const int64_t total = n * dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += stride) {
    out[t] = InitValue(init, ids[t / dim], t % dim);
  }
}

}  // namespace
}  // namespace cuda
}  // namespace sok_lite

extern "C" cudaError_t sok_lite_cuda_init_rows(const SokLiteCudaRowInit* init, const int64_t* ids,
                                               int64_t n, int64_t dim, float* out,
                                               cudaStream_t stream) {
  using namespace sok_lite::cuda;
  if (!init || init->kind < SOK_LITE_CUDA_INIT_NORMAL || init->kind > SOK_LITE_CUDA_INIT_CONSTANT)
    return cudaErrorInvalidValue;
  if (n < 0 || dim < 0) return cudaErrorInvalidValue;
  if (n == 0 || dim == 0) return cudaSuccess;
  if (!ids || !out) return cudaErrorInvalidValue;
  int grid = 0;
  cudaError_t err = GridFor(InitRowsKernel, n * dim, &grid);
  if (err != cudaSuccess) return err;
  InitRowsKernel<<<grid, kBlockThreads, 0, stream>>>(*init, ids, n, dim, out);
  return cudaGetLastError();
}
