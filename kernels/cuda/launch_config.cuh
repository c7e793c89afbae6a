// Grid sizing shared by the launchers: enough blocks to fill every SM at full occupancy, never
// more than the work needs; kernels then loop grid-stride over the rest.
#ifndef SOK_LITE_KERNELS_CUDA_LAUNCH_CONFIG_CUH_
#define SOK_LITE_KERNELS_CUDA_LAUNCH_CONFIG_CUH_

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace sok_lite {
namespace cuda {

constexpr int kBlockThreads = 256;
constexpr int kMaxDevices = 64;

// SM count of the current device, queried once per device (the attribute query is cheap, but
// launches sit on the step's critical path).
inline cudaError_t MultiProcessorCount(int* count) {
  static std::atomic<int> cached[kMaxDevices] = {};
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device >= 0 && device < kMaxDevices) {
    const int known = cached[device].load(std::memory_order_relaxed);
    if (known > 0) {
      *count = known;
      return cudaSuccess;
    }
  }
  err = cudaDeviceGetAttribute(count, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  if (device >= 0 && device < kMaxDevices) cached[device].store(*count);
  return cudaSuccess;
}

// Blocks of kBlockThreads for `threads` work items of `kernel`: min(needed, SMs x resident
// blocks per SM), at least 1.
template <typename Kernel>
cudaError_t GridFor(Kernel kernel, int64_t threads, int* grid) {
  int sms = 0;
  cudaError_t err = MultiProcessorCount(&sms);
  if (err != cudaSuccess) return err;
  int per_sm = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kBlockThreads, 0);
  if (err != cudaSuccess) return err;
  const int64_t needed = (threads + kBlockThreads - 1) / kBlockThreads;
  const int64_t full = static_cast<int64_t>(sms) * std::max(per_sm, 1);
  *grid = static_cast<int>(std::max<int64_t>(1, std::min(needed, full)));
  return cudaSuccess;
}

// Threads cooperating on one row: the smallest power of two >= the row's vector count, capped
// at a warp, so short rows do not leave most lanes idle and a group never spans two warps.
inline int ThreadsPerRow(int64_t vectors_per_row) {
  int group = 1;
  while (group < 32 && group < vectors_per_row) group *= 2;
  return group;
}

}  // namespace cuda
}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CUDA_LAUNCH_CONFIG_CUH_
