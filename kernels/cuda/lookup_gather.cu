// out[i, :] = table[indices[i], :]: the read side of the lookup and of the exchange buffers
// (16-bit tables widened to float32 on the way).
#include "kernels/core/half_rows.h"
#include "kernels/cuda/launch_config.cuh"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/cuda/vec.cuh"

namespace sok_lite {
namespace cuda {
namespace {

template <int W>
__global__ void GatherRowsKernel(const float* __restrict__ table, int64_t dim,
                                 const int64_t* __restrict__ indices, int64_t n, int group,
                                 float* __restrict__ out) {
  const int64_t vectors = dim / W;
  const int64_t total = n * group;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += stride) {
    const int64_t i = t / group;
    const float* src = table + indices[i] * dim;
    for (int64_t c = t % group; c < vectors; c += group) {
      Store<W>(out + i * dim + c * W, Load<W>(src + c * W));
    }
  }
}

template <int W>
cudaError_t Launch(const float* table, int64_t dim, const int64_t* indices, int64_t n, float* out,
                   cudaStream_t stream) {
  const int group = ThreadsPerRow(dim / W);
  int grid = 0;
  cudaError_t err = GridFor(GatherRowsKernel<W>, n * group, &grid);
  if (err != cudaSuccess) return err;
  GatherRowsKernel<W><<<grid, kBlockThreads, 0, stream>>>(table, dim, indices, n, group, out);
  return cudaGetLastError();
}

// One thread per value: a 16-bit row is half the bytes of a float row, and the widening is a
// shift (bfloat16) or a few integer operations (float16).
__global__ void GatherHalfRowsKernel(const uint16_t* __restrict__ table, HalfFormat format,
                                     int64_t dim, const int64_t* __restrict__ indices, int64_t n,
                                     float* __restrict__ out) {
  const int64_t total = n * dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += stride) {
    const int64_t i = t / dim, c = t % dim;
    out[t] = HalfToFloat(format, table[indices[i] * dim + c]);
  }
}

}  // namespace
}  // namespace cuda
}  // namespace sok_lite

extern "C" cudaError_t sok_lite_cuda_gather_half_rows(const uint16_t* table, int format,
                                                      int64_t dim, const int64_t* indices,
                                                      int64_t n, float* out, cudaStream_t stream) {
  using sok_lite::HalfFormat;
  if (dim <= 0 || n < 0 || format < 0 || format > 1) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!table || !indices || !out) return cudaErrorInvalidValue;
  int grid = 0;
  cudaError_t err = sok_lite::cuda::GridFor(sok_lite::cuda::GatherHalfRowsKernel, n * dim, &grid);
  if (err != cudaSuccess) return err;
  sok_lite::cuda::GatherHalfRowsKernel<<<grid, sok_lite::cuda::kBlockThreads, 0, stream>>>(
      table, static_cast<HalfFormat>(format), dim, indices, n, out);
  return cudaGetLastError();
}

extern "C" cudaError_t sok_lite_cuda_gather_rows(const float* table, int64_t dim,
                                                 const int64_t* indices, int64_t n, float* out,
                                                 cudaStream_t stream) {
  if (dim <= 0 || n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!table || !indices || !out) return cudaErrorInvalidValue;
  if (sok_lite::cuda::CanUseFloat4(dim, {table, out})) {
    return sok_lite::cuda::Launch<4>(table, dim, indices, n, out, stream);
  }
  return sok_lite::cuda::Launch<1>(table, dim, indices, n, out, stream);
}
