// Range checks of values grouped in segments (the ids of an exchange message, its send
// positions), each segment with its own bound. One thread per value finds its segment by binary
// search in the segment ends, so one huge segment and many small ones load the GPU alike.
#include <cstdint>

#include "kernels/cuda/launch_config.cuh"
#include "kernels/cuda/sok_lite_cuda.h"

namespace sok_lite {
namespace cuda {
namespace {

using u64 = unsigned long long;

// The segment holding flat value k: the first s with ends[s] > k.
__device__ __forceinline__ int64_t SegmentOf(const int64_t* ends, int64_t num_segments, int64_t k) {
  int64_t lo = 0, hi = num_segments - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (ends[mid] > k) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

template <typename V>
__global__ void CheckSegmentsKernel(const V* __restrict__ values, const int64_t* __restrict__ begin,
                                    const int64_t* __restrict__ ends,
                                    const int64_t* __restrict__ limit, int64_t num_segments,
                                    int64_t total, uint64_t* bad) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < total;
       k += stride) {
    const int64_t s = SegmentOf(ends, num_segments, k);
    const int64_t j = k - (s == 0 ? 0 : ends[s - 1]);
    const int64_t v = values[begin[s] + j];
    if (v < 0 || (limit[s] >= 0 && v >= limit[s])) {
      atomicMin(reinterpret_cast<u64*>(bad) + s, static_cast<u64>(j));
    }
  }
}

template <typename V>
cudaError_t CheckSegments(const V* values, const int64_t* begin, const int64_t* ends,
                          const int64_t* limit, int64_t num_segments, int64_t total, uint64_t* bad,
                          cudaStream_t stream) {
  if (num_segments < 0 || total < 0) return cudaErrorInvalidValue;
  if (num_segments == 0) return cudaSuccess;
  if (!begin || !ends || !limit || !bad || (total > 0 && !values)) return cudaErrorInvalidValue;
  cudaError_t err = cudaMemsetAsync(bad, 0xff, num_segments * sizeof(uint64_t), stream);
  if (err != cudaSuccess || total == 0) return err;
  int grid = 0;
  if ((err = GridFor(CheckSegmentsKernel<V>, total, &grid)) != cudaSuccess) return err;
  CheckSegmentsKernel<V>
      <<<grid, kBlockThreads, 0, stream>>>(values, begin, ends, limit, num_segments, total, bad);
  return cudaGetLastError();
}

}  // namespace
}  // namespace cuda
}  // namespace sok_lite

extern "C" cudaError_t sok_lite_cuda_check_segments(const int64_t* values, const int64_t* begin,
                                                    const int64_t* ends, const int64_t* limit,
                                                    int64_t num_segments, int64_t total,
                                                    uint64_t* bad, cudaStream_t stream) {
  return sok_lite::cuda::CheckSegments(values, begin, ends, limit, num_segments, total, bad,
                                       stream);
}

extern "C" cudaError_t sok_lite_cuda_check_segments_i32(const int32_t* values, const int64_t* begin,
                                                        const int64_t* ends, const int64_t* limit,
                                                        int64_t num_segments, int64_t total,
                                                        uint64_t* bad, cudaStream_t stream) {
  return sok_lite::cuda::CheckSegments(values, begin, ends, limit, num_segments, total, bad,
                                       stream);
}
