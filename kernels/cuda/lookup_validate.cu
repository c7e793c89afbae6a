// Device-side validation of ragged ids (kernels/core/lookup_validate.h): each check records its first
// failing index with an atomicMin, so the host learns the outcome from one small copy instead
// of copying the ids.
#include <cstdint>

#include "kernels/cuda/launch_config.cuh"
#include "kernels/cuda/sok_lite_cuda.h"

namespace sok_lite {
namespace cuda {
namespace {

using u64 = unsigned long long;

__device__ __forceinline__ void Record(uint64_t* bad, int which, int64_t index) {
  atomicMin(reinterpret_cast<u64*>(bad) + which, static_cast<u64>(index));
}

// One thread per split entry b in [0, batch]: order, then the sample's hotness.
__global__ void CheckSplitsKernel(const int64_t* __restrict__ row_splits, int64_t batch, int64_t n,
                                  int64_t hotness, uint64_t* bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b <= batch;
       b += stride) {
    const int64_t s = row_splits[b];
    const bool ordered = b == 0 ? s == 0 : s >= row_splits[b - 1];
    if (!ordered || (b == batch && s != n) || s > n) Record(bad, 0, b);
    if (b < batch && hotness > 0 && row_splits[b + 1] - s > hotness) Record(bad, 1, b);
  }
}

__global__ void CheckValuesKernel(const int64_t* __restrict__ ids, int64_t num_rows,
                                  const int32_t* __restrict__ inverse, int64_t num_unique,
                                  int64_t n, uint64_t* bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += stride) {
    if (ids && num_rows >= 0 && (ids[k] < 0 || ids[k] >= num_rows)) Record(bad, 2, k);
    if (inverse && (inverse[k] < 0 || inverse[k] >= num_unique)) Record(bad, 3, k);
  }
}

}  // namespace
}  // namespace cuda
}  // namespace sok_lite

extern "C" cudaError_t sok_lite_cuda_check_ragged(const int64_t* row_splits, int64_t batch,
                                                  int64_t n, const int64_t* ids, int64_t num_rows,
                                                  int64_t hotness, const int32_t* inverse,
                                                  int64_t num_unique, uint64_t* bad,
                                                  cudaStream_t stream) {
  using namespace sok_lite::cuda;
  if (batch < 0 || n < 0 || !row_splits || !bad) return cudaErrorInvalidValue;
  cudaError_t err = cudaMemsetAsync(bad, 0xff, 4 * sizeof(uint64_t), stream);
  if (err != cudaSuccess) return err;
  int grid = 0;
  if ((err = GridFor(CheckSplitsKernel, batch + 1, &grid)) != cudaSuccess) return err;
  CheckSplitsKernel<<<grid, kBlockThreads, 0, stream>>>(row_splits, batch, n, hotness, bad);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  if (n == 0 || (!ids && !inverse)) return cudaSuccess;
  if ((err = GridFor(CheckValuesKernel, n, &grid)) != cudaSuccess) return err;
  CheckValuesKernel<<<grid, kBlockThreads, 0, stream>>>(ids, num_rows, inverse, num_unique, n, bad);
  return cudaGetLastError();
}
