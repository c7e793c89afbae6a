// Deduplication of ids (kernels/core/lookup_unique.h) in first-occurrence order:
//  1. insert: every position probes an open-addressing table (linear probing, power of two
//     >= 2n slots, hashed by SplitMix64Finalizer) whose slots hold a POSITION of the slot's
//     key, claimed with atomicCAS; the key is read back from ids[], so no id value marks an
//     empty slot. An atomicMin leaves the first position of each key in its slot.
//  2. a position is a key's first occurrence iff its slot holds it; an exclusive scan of those
//     flags numbers the unique ids in order of first occurrence.
//  3. first occurrences write unique[] and store their number in the slot; every position then
//     reads its inverse (and bumps its count) from the slot.
// Each step's result is a pure function of ids[], so the output is the same as the CPU's.
#include <cub/device/device_scan.cuh>

#include "kernels/core/cpu_gpu_rules.h"
#include "kernels/cuda/launch_config.cuh"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/cuda/workspace.cuh"

namespace sok_lite {
namespace cuda {
namespace {

constexpr int32_t kEmpty = -1;

uint64_t SlotCount(int64_t n) {
  uint64_t capacity = 16;
  while (capacity < static_cast<uint64_t>(n) * 2) capacity <<= 1;
  return capacity;
}

struct Scratch {
  int32_t* slots;
  int32_t* where;  // slot of each position
  int32_t* first;  // 1 for a key's first occurrence
  int32_t* rank;   // exclusive scan of first
  void* scan_temp;
  size_t scan_bytes;
};

// Lays out the scratch arrays; with a null workspace, only sizes are computed.
cudaError_t Layout(int64_t n, void* workspace, Scratch* s, size_t* total) {
  Workspace ws(workspace);
  s->slots = ws.Take<int32_t>(SlotCount(n));
  s->where = ws.Take<int32_t>(n);
  s->first = ws.Take<int32_t>(n);
  s->rank = ws.Take<int32_t>(n);
  s->scan_bytes = 0;
  cudaError_t err =
      cub::DeviceScan::ExclusiveSum(nullptr, s->scan_bytes, s->first, s->rank, static_cast<int>(n));
  if (err != cudaSuccess) return err;
  s->scan_temp = ws.Take<char>(s->scan_bytes);
  *total = ws.used();
  return cudaSuccess;
}

__global__ void InsertKernel(const int64_t* __restrict__ ids, int64_t n, uint64_t mask,
                             int32_t* slots, int32_t* __restrict__ where) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const int64_t key = ids[i];
    uint64_t p = SplitMix64Finalizer(static_cast<uint64_t>(key)) & mask;
    while (true) {
      int32_t holder = atomicCAS(slots + p, kEmpty, static_cast<int32_t>(i));
      if (holder == kEmpty) break;  // claimed: the slot now names position i
      if (ids[holder] == key) {
        atomicMin(slots + p, static_cast<int32_t>(i));
        break;
      }
      p = (p + 1) & mask;
    }
    where[i] = static_cast<int32_t>(p);
  }
}

__global__ void FirstKernel(const int32_t* __restrict__ slots, const int32_t* __restrict__ where,
                            int64_t n, int32_t* __restrict__ first) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    first[i] = slots[where[i]] == i;
  }
}

__global__ void EmitKernel(const int64_t* __restrict__ ids, const int32_t* __restrict__ where,
                           const int32_t* __restrict__ first, const int32_t* __restrict__ rank,
                           int64_t n, int32_t* __restrict__ slots, int64_t* __restrict__ unique,
                           int64_t* __restrict__ num_unique) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    if (first[i]) {
      unique[rank[i]] = ids[i];
      slots[where[i]] = rank[i];
    }
    if (i == n - 1) *num_unique = static_cast<int64_t>(rank[i]) + first[i];
  }
}

__global__ void InverseKernel(const int32_t* __restrict__ slots, const int32_t* __restrict__ where,
                              int64_t n, int32_t* __restrict__ inverse, int32_t* counts) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const int32_t u = slots[where[i]];
    inverse[i] = u;
    if (counts) atomicAdd(counts + u, 1);
  }
}

template <typename Kernel, typename... Args>
cudaError_t Run(Kernel kernel, int64_t n, cudaStream_t stream, Args... args) {
  int grid = 0;
  cudaError_t err = GridFor(kernel, n, &grid);
  if (err != cudaSuccess) return err;
  kernel<<<grid, kBlockThreads, 0, stream>>>(args...);
  return cudaGetLastError();
}

}  // namespace
}  // namespace cuda
}  // namespace sok_lite

extern "C" cudaError_t sok_lite_cuda_unique_workspace_size(int64_t n, size_t* bytes) {
  if (n < 0 || n >= (int64_t{1} << 31) || !bytes) return cudaErrorInvalidValue;
  sok_lite::cuda::Scratch s;
  return sok_lite::cuda::Layout(n, nullptr, &s, bytes);
}

extern "C" cudaError_t sok_lite_cuda_unique_ids(const int64_t* ids, int64_t n, int64_t* unique,
                                                int32_t* inverse, int32_t* counts,
                                                int64_t* num_unique, void* workspace,
                                                size_t workspace_bytes, cudaStream_t stream) {
  using namespace sok_lite::cuda;
  if (n < 0 || n >= (int64_t{1} << 31) || !num_unique) return cudaErrorInvalidValue;
  if (n == 0) return cudaMemsetAsync(num_unique, 0, sizeof(int64_t), stream);
  if (!ids || !unique || !inverse || !workspace) return cudaErrorInvalidValue;
  Scratch s;
  size_t needed = 0;
  cudaError_t err = Layout(n, workspace, &s, &needed);
  if (err != cudaSuccess) return err;
  if (workspace_bytes < needed) return cudaErrorInvalidValue;
  const uint64_t mask = SlotCount(n) - 1;
  if ((err = cudaMemsetAsync(s.slots, 0xff, (mask + 1) * sizeof(int32_t), stream)) != cudaSuccess)
    return err;
  if (counts && (err = cudaMemsetAsync(counts, 0, n * sizeof(int32_t), stream)) != cudaSuccess)
    return err;
  if ((err = Run(InsertKernel, n, stream, ids, n, mask, s.slots, s.where)) != cudaSuccess)
    return err;
  if ((err = Run(FirstKernel, n, stream, s.slots, s.where, n, s.first)) != cudaSuccess) return err;
  err = cub::DeviceScan::ExclusiveSum(s.scan_temp, s.scan_bytes, s.first, s.rank,
                                      static_cast<int>(n), stream);
  if (err != cudaSuccess) return err;
  err = Run(EmitKernel, n, stream, ids, s.where, s.first, s.rank, n, s.slots, unique, num_unique);
  if (err != cudaSuccess) return err;
  return Run(InverseKernel, n, stream, s.slots, s.where, n, inverse, counts);
}
