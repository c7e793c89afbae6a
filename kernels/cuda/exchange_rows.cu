// Row copies through an int32 position map: the unpack (scatter), pack (gather) and reduce
// (scatter-add) steps of the exchange messages. One group of threads per row, as lookup_gather.cu.
#include "kernels/cuda/launch_config.cuh"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/cuda/vec.cuh"

namespace sok_lite {
namespace cuda {
namespace {

enum class Copy { kScatter, kGather, kScatterAdd };

template <Copy C, int W>
__global__ void CopyRowsKernel(const float* __restrict__ src, int64_t dim,
                               const int32_t* __restrict__ positions, int64_t n, int group,
                               float* __restrict__ dst) {
  const int64_t vectors = dim / W;
  const int64_t total = n * group;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += stride) {
    const int64_t i = t / group;
    const int64_t p = positions[i];
    const float* from = src + (C == Copy::kGather ? p : i) * dim;
    float* to = dst + (C == Copy::kGather ? i : p) * dim;
    for (int64_t c = t % group; c < vectors; c += group) {
      if constexpr (C == Copy::kScatterAdd) {
        AtomicAdd<W>(to + c * W, Load<W>(from + c * W));
      } else {
        Store<W>(to + c * W, Load<W>(from + c * W));
      }
    }
  }
}

template <Copy C, int W>
cudaError_t Launch(const float* src, int64_t dim, const int32_t* positions, int64_t n, float* dst,
                   cudaStream_t stream) {
  const int group = ThreadsPerRow(dim / W);
  int grid = 0;
  cudaError_t err = GridFor(CopyRowsKernel<C, W>, n * group, &grid);
  if (err != cudaSuccess) return err;
  CopyRowsKernel<C, W><<<grid, kBlockThreads, 0, stream>>>(src, dim, positions, n, group, dst);
  return cudaGetLastError();
}

template <Copy C>
cudaError_t CopyRows(const float* src, int64_t dim, const int32_t* positions, int64_t n, float* dst,
                     cudaStream_t stream) {
  if (dim <= 0 || n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!src || !positions || !dst) return cudaErrorInvalidValue;
  if (CanUseFloat4(dim, {src, dst})) return Launch<C, 4>(src, dim, positions, n, dst, stream);
  return Launch<C, 1>(src, dim, positions, n, dst, stream);
}

}  // namespace
}  // namespace cuda
}  // namespace sok_lite

using sok_lite::cuda::Copy;
using sok_lite::cuda::CopyRows;

extern "C" cudaError_t sok_lite_cuda_scatter_rows(const float* src, int64_t dim,
                                                  const int32_t* positions, int64_t n, float* dst,
                                                  cudaStream_t stream) {
  return CopyRows<Copy::kScatter>(src, dim, positions, n, dst, stream);
}

extern "C" cudaError_t sok_lite_cuda_gather_rows_i32(const float* src, int64_t dim,
                                                     const int32_t* positions, int64_t n,
                                                     float* dst, cudaStream_t stream) {
  return CopyRows<Copy::kGather>(src, dim, positions, n, dst, stream);
}

extern "C" cudaError_t sok_lite_cuda_scatter_add_rows(const float* src, int64_t dim,
                                                      const int32_t* positions, int64_t n,
                                                      float* dst, cudaStream_t stream) {
  return CopyRows<Copy::kScatterAdd>(src, dim, positions, n, dst, stream);
}
