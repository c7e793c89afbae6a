// Gather-combine forward and backward (kernels/core/lookup_combine.h on the GPU). One group of
// ThreadsPerRow threads per sample; each thread owns whole float4s (or floats) of the row and
// walks the sample's ids, so the output row is written once and every table row read once per
// id.
#include "kernels/cuda/launch_config.cuh"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/cuda/vec.cuh"

namespace sok_lite {
namespace cuda {
namespace {

__global__ void SampleScalesKernel(const int64_t* __restrict__ row_splits,
                                   const float* __restrict__ weights, int64_t batch, int combiner,
                                   float* __restrict__ scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < batch;
       b += stride) {
    if (combiner == SOK_LITE_CUDA_SUM) {
      scale[b] = 1.0f;
      continue;
    }
    float denom = 0.0f;
    for (int64_t k = row_splits[b]; k < row_splits[b + 1]; ++k) {
      const float w = weights ? weights[k] : 1.0f;
      denom += combiner == SOK_LITE_CUDA_MEAN ? w : w * w;
    }
    if (combiner == SOK_LITE_CUDA_SQRTN) denom = sqrtf(denom);
    scale[b] = denom == 0.0f ? 0.0f : 1.0f / denom;
  }
}

template <int W>
__global__ void CombineForwardKernel(const float* __restrict__ rows, int64_t dim,
                                     const int32_t* __restrict__ inverse,
                                     const int64_t* __restrict__ row_splits,
                                     const float* __restrict__ weights,
                                     const float* __restrict__ scale, int64_t batch, int group,
                                     float* __restrict__ out) {
  const int64_t vectors = dim / W;
  const int64_t total = batch * group;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += stride) {
    const int64_t b = t / group;
    const int64_t k0 = row_splits[b], k1 = row_splits[b + 1];
    const float s = scale[b];
    for (int64_t c = t % group; c < vectors; c += group) {
      Vec<W> acc = Zeros<W>();
      for (int64_t k = k0; k < k1; ++k) {
        const float w = weights ? weights[k] : 1.0f;
        const Vec<W> r = Load<W>(rows + static_cast<int64_t>(inverse[k]) * dim + c * W);
#pragma unroll
        for (int i = 0; i < W; ++i) acc.v[i] += w * r.v[i];
      }
      if (s != 1.0f) {
#pragma unroll
        for (int i = 0; i < W; ++i) acc.v[i] *= s;
      }
      Store<W>(out + b * dim + c * W, acc);
    }
  }
}

// grad_out[b] is read once per column chunk and scattered into every row the sample used.
template <int W>
__global__ void CombineBackwardKernel(const float* __restrict__ grad_out, int64_t dim,
                                      const int32_t* __restrict__ inverse,
                                      const int64_t* __restrict__ row_splits, int64_t batch,
                                      const float* __restrict__ weights,
                                      const float* __restrict__ scale, int group,
                                      float* __restrict__ grad_rows) {
  const int64_t vectors = dim / W;
  const int64_t total = batch * group;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += stride) {
    const int64_t b = t / group;
    const int64_t k0 = row_splits[b], k1 = row_splits[b + 1];
    if (k0 == k1) continue;
    const float s = scale[b];
    for (int64_t c = t % group; c < vectors; c += group) {
      const Vec<W> g = Load<W>(grad_out + b * dim + c * W);
      for (int64_t k = k0; k < k1; ++k) {
        const float f = (weights ? weights[k] : 1.0f) * s;
        Vec<W> add;
#pragma unroll
        for (int i = 0; i < W; ++i) add.v[i] = f * g.v[i];
        AtomicAdd<W>(grad_rows + static_cast<int64_t>(inverse[k]) * dim + c * W, add);
      }
    }
  }
}

template <int W>
cudaError_t LaunchForward(const float* rows, int64_t dim, const int32_t* inverse,
                          const int64_t* row_splits, const float* weights, const float* scale,
                          int64_t batch, float* out, cudaStream_t stream) {
  const int group = ThreadsPerRow(dim / W);
  int grid = 0;
  cudaError_t err = GridFor(CombineForwardKernel<W>, batch * group, &grid);
  if (err != cudaSuccess) return err;
  CombineForwardKernel<W><<<grid, kBlockThreads, 0, stream>>>(rows, dim, inverse, row_splits,
                                                              weights, scale, batch, group, out);
  return cudaGetLastError();
}

template <int W>
cudaError_t LaunchBackward(const float* grad_out, int64_t dim, const int32_t* inverse,
                           const int64_t* row_splits, int64_t batch, const float* weights,
                           const float* scale, float* grad_rows, cudaStream_t stream) {
  const int group = ThreadsPerRow(dim / W);
  int grid = 0;
  cudaError_t err = GridFor(CombineBackwardKernel<W>, batch * group, &grid);
  if (err != cudaSuccess) return err;
  CombineBackwardKernel<W><<<grid, kBlockThreads, 0, stream>>>(
      grad_out, dim, inverse, row_splits, batch, weights, scale, group, grad_rows);
  return cudaGetLastError();
}

}  // namespace
}  // namespace cuda
}  // namespace sok_lite

using sok_lite::cuda::CanUseFloat4;

extern "C" cudaError_t sok_lite_cuda_sample_scales(const int64_t* row_splits,
                                                   const float* weights, int64_t batch,
                                                   int combiner, float* scale,
                                                   cudaStream_t stream) {
  if (batch < 0 || combiner < SOK_LITE_CUDA_SUM || combiner > SOK_LITE_CUDA_SQRTN)
    return cudaErrorInvalidValue;
  if (batch == 0) return cudaSuccess;
  if (!row_splits || !scale) return cudaErrorInvalidValue;
  int grid = 0;
  cudaError_t err = sok_lite::cuda::GridFor(sok_lite::cuda::SampleScalesKernel, batch, &grid);
  if (err != cudaSuccess) return err;
  sok_lite::cuda::SampleScalesKernel<<<grid, sok_lite::cuda::kBlockThreads, 0, stream>>>(
      row_splits, weights, batch, combiner, scale);
  return cudaGetLastError();
}

extern "C" cudaError_t sok_lite_cuda_combine_forward(const float* rows, int64_t dim,
                                                     const int32_t* inverse,
                                                     const int64_t* row_splits,
                                                     const float* weights, const float* scale,
                                                     int64_t batch, float* out,
                                                     cudaStream_t stream) {
  if (dim <= 0 || batch < 0) return cudaErrorInvalidValue;
  if (batch == 0) return cudaSuccess;
  if (!row_splits || !scale || !out) return cudaErrorInvalidValue;
  if (CanUseFloat4(dim, {rows, out})) {
    return sok_lite::cuda::LaunchForward<4>(rows, dim, inverse, row_splits, weights, scale, batch,
                                            out, stream);
  }
  return sok_lite::cuda::LaunchForward<1>(rows, dim, inverse, row_splits, weights, scale, batch,
                                          out, stream);
}

extern "C" cudaError_t sok_lite_cuda_combine_backward(const float* grad_out, int64_t dim,
                                                      const int32_t* inverse,
                                                      const int64_t* row_splits, int64_t batch,
                                                      const float* weights, const float* scale,
                                                      int64_t num_unique, float* grad_rows,
                                                      cudaStream_t stream) {
  if (dim <= 0 || batch < 0 || num_unique < 0) return cudaErrorInvalidValue;
  if (num_unique > 0) {
    if (!grad_rows) return cudaErrorInvalidValue;
    cudaError_t err =
        cudaMemsetAsync(grad_rows, 0, num_unique * dim * sizeof(float), stream);
    if (err != cudaSuccess) return err;
  }
  if (batch == 0 || num_unique == 0) return cudaSuccess;
  if (!grad_out || !row_splits || !scale) return cudaErrorInvalidValue;
  if (CanUseFloat4(dim, {grad_out, grad_rows})) {
    return sok_lite::cuda::LaunchBackward<4>(grad_out, dim, inverse, row_splits, batch, weights,
                                             scale, grad_rows, stream);
  }
  return sok_lite::cuda::LaunchBackward<1>(grad_out, dim, inverse, row_splits, batch, weights,
                                           scale, grad_rows, stream);
}
