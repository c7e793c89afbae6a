// Partition of unique ids by owner rank (core PartitionByOwner), same message and order:
//  1. per table, every id gets a segment key r * T + t (r its owner) and its owner-local row;
//  2. a stable radix sort of (segment key, global position) puts ids in message order: by
//     segment, and within a segment in unique order;
//  3. segment counts and rank boundaries come from binary searches in the sorted keys, so the
//     headers need no atomics; the sorted j-th id of rank r lands at message[j + (r + 1) * T].
#include <cub/device/device_radix_sort.cuh>

#include "kernels/core/cpu_gpu_rules.h"
#include "kernels/cuda/launch_config.cuh"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/cuda/workspace.cuh"

namespace sok_lite {
namespace cuda {
namespace {

struct Scratch {
  uint64_t* keys_in;
  uint64_t* keys_out;
  int32_t* pos_in;
  int32_t* pos_out;
  int64_t* local_row;     // per global position
  int32_t* index_in_tab;  // per global position: index in its table's unique ids
  void* sort_temp;
  size_t sort_bytes;
};

int EndBit(int64_t segments) {
  int bits = 1;
  while (bits < 64 && (uint64_t{1} << bits) < static_cast<uint64_t>(segments)) ++bits;
  return bits;
}

cudaError_t Layout(int64_t total, int64_t segments, void* workspace, Scratch* s, size_t* bytes) {
  Workspace ws(workspace);
  s->keys_in = ws.Take<uint64_t>(total);
  s->keys_out = ws.Take<uint64_t>(total);
  s->pos_in = ws.Take<int32_t>(total);
  s->pos_out = ws.Take<int32_t>(total);
  s->local_row = ws.Take<int64_t>(total);
  s->index_in_tab = ws.Take<int32_t>(total);
  s->sort_bytes = 0;
  cudaError_t err =
      cub::DeviceRadixSort::SortPairs(nullptr, s->sort_bytes, s->keys_in, s->keys_out, s->pos_in,
                                      s->pos_out, static_cast<int>(total), 0, EndBit(segments));
  if (err != cudaSuccess) return err;
  s->sort_temp = ws.Take<char>(s->sort_bytes);
  *bytes = ws.used();
  return cudaSuccess;
}

__global__ void KeysKernel(const int64_t* __restrict__ ids, int64_t n, int64_t owner, int64_t table,
                           int64_t num_tables, int64_t num_ranks, int64_t start, Scratch s) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const int64_t id = ids[i], g = start + i;
    s.keys_in[g] = static_cast<uint64_t>(OwnerRank(owner, id, num_ranks) * num_tables + table);
    s.pos_in[g] = static_cast<int32_t>(g);
    s.local_row[g] = OwnerLocalRow(owner, id, num_ranks);
    s.index_in_tab[g] = static_cast<int32_t>(i);
  }
}

// First index of sorted[0, n) that is >= value.
__device__ int64_t LowerBound(const uint64_t* sorted, int64_t n, uint64_t value) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (sorted[mid] < value) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// One thread per rank: its T counts, its split and its header.
__global__ void HeadersKernel(const uint64_t* __restrict__ sorted, int64_t total,
                              int64_t num_tables, int64_t num_ranks, int64_t* __restrict__ counts,
                              int64_t* __restrict__ message, int64_t* __restrict__ splits) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < num_ranks;
       r += stride) {
    const uint64_t seg0 = static_cast<uint64_t>(r * num_tables);
    const int64_t rank_begin = LowerBound(sorted, total, seg0);
    int64_t begin = rank_begin;
    for (int64_t t = 0; t < num_tables; ++t) {
      const int64_t end = LowerBound(sorted, total, seg0 + t + 1);
      counts[r * num_tables + t] = end - begin;
      message[r * num_tables + rank_begin + t] = end - begin;
      begin = end;
    }
    splits[r] = num_tables + begin - rank_begin;
  }
}

__global__ void ScatterKernel(const uint64_t* __restrict__ sorted, const int32_t* __restrict__ pos,
                              int64_t total, int64_t num_tables, Scratch s,
                              int64_t* __restrict__ message, int32_t* __restrict__ send_pos) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < total;
       j += stride) {
    const int64_t r = static_cast<int64_t>(sorted[j]) / num_tables;
    const int32_t g = pos[j];
    message[j + (r + 1) * num_tables] = s.local_row[g];
    send_pos[j] = s.index_in_tab[g];
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

bool SizesOk(int64_t total, int64_t num_ranks, int64_t num_tables) {
  return total >= 0 && total < (int64_t{1} << 31) && num_ranks >= 1 &&
         num_ranks <= (int64_t{1} << 20) && num_tables >= 1 && num_tables <= (int64_t{1} << 20);
}

}  // namespace
}  // namespace cuda
}  // namespace sok_lite

extern "C" cudaError_t sok_lite_cuda_partition_workspace_size(int64_t total, int64_t num_ranks,
                                                              int64_t num_tables, size_t* bytes) {
  if (!sok_lite::cuda::SizesOk(total, num_ranks, num_tables) || !bytes)
    return cudaErrorInvalidValue;
  sok_lite::cuda::Scratch s;
  return sok_lite::cuda::Layout(total, num_ranks * num_tables, nullptr, &s, bytes);
}

extern "C" cudaError_t sok_lite_cuda_partition_by_owner(
    const int64_t* const* unique, const int64_t* num_unique, const int64_t* owners,
    int64_t num_tables, int64_t num_ranks, int64_t* counts, int64_t* message, int64_t* splits,
    int32_t* send_pos, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  using namespace sok_lite::cuda;
  if (num_tables < 1 || !unique || !num_unique || !owners) return cudaErrorInvalidValue;
  int64_t total = 0;
  for (int64_t t = 0; t < num_tables; ++t) {
    if (num_unique[t] < 0 || (num_unique[t] > 0 && !unique[t])) return cudaErrorInvalidValue;
    if (owners[t] < SOK_LITE_OWNER_HASHED || owners[t] >= num_ranks) return cudaErrorInvalidValue;
    total += num_unique[t];
  }
  if (!SizesOk(total, num_ranks, num_tables)) return cudaErrorInvalidValue;
  if (!counts || !message || !splits || (total > 0 && (!send_pos || !workspace)))
    return cudaErrorInvalidValue;
  Scratch s = {};
  size_t needed = 0;
  const int64_t segments = num_ranks * num_tables;
  cudaError_t err = Layout(total, segments, workspace, &s, &needed);
  if (err != cudaSuccess) return err;
  if (total > 0 && workspace_bytes < needed) return cudaErrorInvalidValue;
  int64_t start = 0;
  for (int64_t t = 0; t < num_tables; ++t) {
    if (num_unique[t] > 0) {
      err = Run(KeysKernel, num_unique[t], stream, unique[t], num_unique[t], owners[t], t,
                num_tables, num_ranks, start, s);
      if (err != cudaSuccess) return err;
    }
    start += num_unique[t];
  }
  if (total > 0) {
    err = cub::DeviceRadixSort::SortPairs(s.sort_temp, s.sort_bytes, s.keys_in, s.keys_out,
                                          s.pos_in, s.pos_out, static_cast<int>(total), 0,
                                          EndBit(segments), stream);
    if (err != cudaSuccess) return err;
  }
  err = Run(HeadersKernel, num_ranks, stream, s.keys_out, total, num_tables, num_ranks, counts,
            message, splits);
  if (err != cudaSuccess) return err;
  if (total == 0) return cudaSuccess;
  return Run(ScatterKernel, total, stream, s.keys_out, s.pos_out, total, num_tables, s, message,
             send_pos);
}
