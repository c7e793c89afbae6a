// The hash table on the GPU (SokLiteCudaTable in sok_lite_cuda.h). Open addressing with linear
// probing over a power-of-two slot array hashed by SplitMix64Finalizer; occupancy lives in `state`
// (empty -> being written -> present), so every int64 value is a key. A key is inserted by the
// thread that moves its first free probe slot from empty to "being written" with a CAS; it writes
// the key and publishes it with a release store of "present". A thread that meets a slot being
// written waits for it and then compares keys, so duplicates of a key within one call end up in the
// same slot and the key is inserted once. Keys are never deleted in place: eviction and growth
// rebuild the table into another one (sok_lite_cuda_table_rehash), so probe chains never hold
// holes.
//
// find_or_insert runs in three launches: claim slots (one thread per key), initialize the rows
// of new keys (one thread per value, from the same counter-based initializer as the CPU), then
// copy rows out. Between the first two, slots_out marks a key its thread inserted as
// -(slot + 2), so each new row is initialized exactly once.
#include <cuda/atomic>

#include "kernels/core/cpu_gpu_rules.h"
#include "kernels/cuda/hash_table_state.cuh"
#include "kernels/cuda/launch_config.cuh"
#include "kernels/cuda/row_init.cuh"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/cuda/vec.cuh"

namespace sok_lite {
namespace cuda {
namespace {

constexpr int64_t kNoSlot = -1;

using StateRef = ::cuda::atomic_ref<int32_t, ::cuda::thread_scope_device>;
using CountRef = ::cuda::atomic_ref<int64_t, ::cuda::thread_scope_device>;

__host__ __device__ __forceinline__ int64_t Encode(int64_t slot) { return -(slot + 2); }
// Idempotent: a slot index stays itself, an encoded new slot becomes its index.
__host__ __device__ __forceinline__ int64_t Decode(int64_t v) { return v <= -2 ? -v - 2 : v; }

// Takes one unit of room under max_size; false when the table is at its limit.
__device__ bool Reserve(const SokLiteCudaTable& t) {
  CountRef size(*t.size);
  if (size.fetch_add(1, ::cuda::memory_order_relaxed) < t.max_size) return true;
  size.fetch_sub(1, ::cuda::memory_order_relaxed);
  return false;
}

struct Claim {
  int64_t slot;  // kNoSlot when there was no room
  bool inserted;
};

__device__ Claim FindOrClaim(const SokLiteCudaTable& t, int64_t key) {
  const uint64_t mask = static_cast<uint64_t>(t.capacity) - 1;
  uint64_t p = SplitMix64Finalizer(static_cast<uint64_t>(key)) & mask;
  for (int64_t probe = 0; probe < t.capacity;) {
    StateRef state(t.state[p]);
    int32_t s = state.load(::cuda::memory_order_acquire);
    if (s == kEmpty) {
      // The key is absent (no deletions: it would sit before the first empty slot). Claim the
      // slot first and take room second, so the size only runs past max_size while the table
      // is full, and no insert fails while room remains.
      int32_t expected = kEmpty;
      if (state.compare_exchange_strong(expected, kWriting, ::cuda::memory_order_acq_rel)) {
        if (!Reserve(t)) {
          state.store(kEmpty, ::cuda::memory_order_release);
          return {kNoSlot, false};
        }
        t.keys[p] = key;
        state.store(kPresent, ::cuda::memory_order_release);
        return {static_cast<int64_t>(p), true};
      }
      s = expected;  // someone else claimed it: maybe for this very key
    }
    while (s == kWriting) s = state.load(::cuda::memory_order_acquire);
    if (s == kEmpty) continue;  // that claim was withdrawn (no room): look at the slot again
    if (t.keys[p] == key) return {static_cast<int64_t>(p), false};
    ++probe;
    p = (p + 1) & mask;
  }
  return {kNoSlot, false};
}

__global__ void ClaimKernel(SokLiteCudaTable t, const int64_t* __restrict__ keys, int64_t n,
                            int64_t step, int64_t* __restrict__ slots_out,
                            int64_t* __restrict__ num_failed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const Claim c = FindOrClaim(t, keys[i]);
    if (c.slot == kNoSlot) {
      slots_out[i] = kNoSlot;
      CountRef(*num_failed).fetch_add(1, ::cuda::memory_order_relaxed);
      continue;
    }
    t.last_seen[c.slot] = step;
    if (c.inserted && t.updated) t.updated[c.slot] = kNeverUpdated;
    slots_out[i] = c.inserted ? Encode(c.slot) : c.slot;
  }
}

// One thread per value of the rows this call inserted.
__global__ void InitNewKernel(SokLiteCudaTable t, SokLiteCudaRowInit init,
                              const int64_t* __restrict__ keys, int64_t n,
                              const int64_t* __restrict__ slots_out) {
  const int64_t dim = t.dim, total = n * dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; x < total;
       x += stride) {
    const int64_t i = x / dim, c = x % dim, v = slots_out[i];
    if (v > -2) continue;
    const int64_t at = Decode(v) * dim + c;
    t.values[at] = InitValue(init, keys[i], c);
    for (int j = 0; j < t.num_slots; ++j) t.slots[j][at] = t.slot_init[j];
  }
}

// slots_out normalized to plain slot indices; out[i] = the key's row, or for a key without a
// slot its initial row (init_missing) or zeros.
template <int W>
__global__ void RowsOutKernel(SokLiteCudaTable t, SokLiteCudaRowInit init, bool init_missing,
                              const int64_t* __restrict__ keys, int64_t n, int group,
                              int64_t* slots_out, float* __restrict__ out) {
  const int64_t dim = t.dim, vectors = dim / W, total = n * group;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; x < total;
       x += stride) {
    const int64_t i = x / group;
    const int64_t slot = Decode(slots_out[i]);
    if (x % group == 0) slots_out[i] = slot;  // others of the group decode either form
    if (!out) continue;
    for (int64_t c = x % group; c < vectors; c += group) {
      Vec<W> r;
      if (slot != kNoSlot) {
        r = Load<W>(t.values + slot * dim + c * W);
      } else {
#pragma unroll
        for (int e = 0; e < W; ++e) r.v[e] = init_missing ? InitValue(init, keys[i], c * W + e) : 0;
      }
      Store<W>(out + i * dim + c * W, r);
    }
  }
}

__global__ void FindKernel(SokLiteCudaTable t, const int64_t* __restrict__ keys, int64_t n,
                           int64_t* __restrict__ slots_out) {
  const uint64_t mask = static_cast<uint64_t>(t.capacity) - 1;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const int64_t key = keys[i];
    uint64_t p = SplitMix64Finalizer(static_cast<uint64_t>(key)) & mask;
    int64_t found = kNoSlot;
    for (int64_t probe = 0; probe < t.capacity; ++probe, p = (p + 1) & mask) {
      const int32_t s = t.state[p];
      if (s == kEmpty) break;
      if (s == kPresent && t.keys[p] == key) {
        found = static_cast<int64_t>(p);
        break;
      }
    }
    slots_out[i] = found;
  }
}

// Copies the value and slot rows of slot `from` of src to slot `to` of dst.
__device__ void CopySlot(const SokLiteCudaTable& src, int64_t from, float* values,
                         float* const* slots, int64_t to) {
  const int64_t dim = src.dim;
  for (int64_t c = 0; c < dim; ++c) values[to * dim + c] = src.values[from * dim + c];
  for (int j = 0; j < src.num_slots; ++j) {
    if (!slots[j]) continue;
    for (int64_t c = 0; c < dim; ++c) slots[j][to * dim + c] = src.slots[j][from * dim + c];
  }
}

struct SlotPointers {
  float* p[3];
};

__global__ void ExportKernel(SokLiteCudaTable t, int64_t max_out, int64_t* __restrict__ keys_out,
                             float* values_out, SlotPointers slots_out, int64_t* count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < t.capacity;
       p += stride) {
    if (t.state[p] != kPresent) continue;
    const int64_t at = CountRef(*count).fetch_add(1, ::cuda::memory_order_relaxed);
    if (at >= max_out) continue;
    keys_out[at] = t.keys[p];
    CopySlot(t, p, values_out, slots_out.p, at);
  }
}

__global__ void RehashKernel(SokLiteCudaTable src, SokLiteCudaTable dst, int64_t min_last_seen,
                             int64_t* num_failed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const SlotPointers dst_slots = {{dst.slots[0], dst.slots[1], dst.slots[2]}};
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < src.capacity;
       p += stride) {
    if (src.state[p] != kPresent || src.last_seen[p] < min_last_seen) continue;
    const Claim c = FindOrClaim(dst, src.keys[p]);
    if (c.slot == kNoSlot) {
      CountRef(*num_failed).fetch_add(1, ::cuda::memory_order_relaxed);
      continue;
    }
    dst.last_seen[c.slot] = src.last_seen[p];
    if (dst.updated) dst.updated[c.slot] = src.updated ? src.updated[p] : kNeverUpdated;
    CopySlot(src, p, dst.values, dst_slots.p, c.slot);
  }
}

bool ValidInit(const SokLiteCudaRowInit* init) {
  return init && init->kind >= SOK_LITE_CUDA_INIT_NORMAL &&
         init->kind <= SOK_LITE_CUDA_INIT_CONSTANT;
}

template <typename Kernel, typename... Args>
cudaError_t Run(Kernel kernel, int64_t threads, cudaStream_t stream, Args... args) {
  int grid = 0;
  cudaError_t err = GridFor(kernel, threads, &grid);
  if (err != cudaSuccess) return err;
  kernel<<<grid, kBlockThreads, 0, stream>>>(args...);
  return cudaGetLastError();
}

cudaError_t RowsOut(const SokLiteCudaTable& t, const SokLiteCudaRowInit& init, bool init_missing,
                    const int64_t* keys, int64_t n, int64_t* slots_out, float* out,
                    cudaStream_t stream) {
  if (CanUseFloat4(t.dim, {t.values, out})) {
    const int group = ThreadsPerRow(t.dim / 4);
    return Run(RowsOutKernel<4>, n * group, stream, t, init, init_missing, keys, n, group,
               slots_out, out);
  }
  const int group = ThreadsPerRow(t.dim);
  return Run(RowsOutKernel<1>, n * group, stream, t, init, init_missing, keys, n, group, slots_out,
             out);
}

}  // namespace
}  // namespace cuda
}  // namespace sok_lite

using sok_lite::cuda::Valid;

extern "C" cudaError_t sok_lite_cuda_table_clear(const SokLiteCudaTable* table,
                                                 cudaStream_t stream) {
  if (!Valid(table)) return cudaErrorInvalidValue;
  cudaError_t err = cudaMemsetAsync(table->state, 0, table->capacity * sizeof(int32_t), stream);
  if (err != cudaSuccess) return err;
  return cudaMemsetAsync(table->size, 0, sizeof(int64_t), stream);
}

extern "C" cudaError_t sok_lite_cuda_table_find_or_insert(
    const SokLiteCudaTable* table, const SokLiteCudaRowInit* init, const int64_t* keys, int64_t n,
    int64_t step, int64_t* slots_out, float* values_out, int64_t* num_failed, cudaStream_t stream) {
  using namespace sok_lite::cuda;
  if (!Valid(table) || !ValidInit(init) || n < 0 || !num_failed) return cudaErrorInvalidValue;
  cudaError_t err = cudaMemsetAsync(num_failed, 0, sizeof(int64_t), stream);
  if (err != cudaSuccess || n == 0) return err;
  if (!keys || !slots_out) return cudaErrorInvalidValue;
  const SokLiteCudaTable& t = *table;
  if ((err = Run(ClaimKernel, n, stream, t, keys, n, step, slots_out, num_failed)) != cudaSuccess)
    return err;
  if ((err = Run(InitNewKernel, n * t.dim, stream, t, *init, keys, n, slots_out)) != cudaSuccess)
    return err;
  return RowsOut(t, *init, true, keys, n, slots_out, values_out, stream);
}

extern "C" cudaError_t sok_lite_cuda_table_find(const SokLiteCudaTable* table, const int64_t* keys,
                                                int64_t n, int64_t* slots_out, float* values_out,
                                                cudaStream_t stream) {
  using namespace sok_lite::cuda;
  if (!Valid(table) || n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!keys || !slots_out) return cudaErrorInvalidValue;
  cudaError_t err = Run(FindKernel, n, stream, *table, keys, n, slots_out);
  if (err != cudaSuccess || !values_out) return err;
  const SokLiteCudaRowInit unused = {SOK_LITE_CUDA_INIT_CONSTANT, 0, 0.0, 0.0};
  return RowsOut(*table, unused, false, keys, n, slots_out, values_out, stream);
}

extern "C" cudaError_t sok_lite_cuda_table_export(const SokLiteCudaTable* table, int64_t max_out,
                                                  int64_t* keys_out, float* values_out,
                                                  float* const* slots_out, int64_t* count,
                                                  cudaStream_t stream) {
  using namespace sok_lite::cuda;
  if (!Valid(table) || max_out < 0 || !count) return cudaErrorInvalidValue;
  if (max_out > 0 && (!keys_out || !values_out)) return cudaErrorInvalidValue;
  SlotPointers slots = {{nullptr, nullptr, nullptr}};
  for (int j = 0; slots_out && j < table->num_slots; ++j) slots.p[j] = slots_out[j];
  cudaError_t err = cudaMemsetAsync(count, 0, sizeof(int64_t), stream);
  if (err != cudaSuccess) return err;
  return Run(ExportKernel, table->capacity, stream, *table, max_out, keys_out, values_out, slots,
             count);
}

extern "C" cudaError_t sok_lite_cuda_table_rehash(const SokLiteCudaTable* src,
                                                  const SokLiteCudaTable* dst,
                                                  int64_t min_last_seen, int64_t* num_failed,
                                                  cudaStream_t stream) {
  using namespace sok_lite::cuda;
  if (!Valid(src) || !Valid(dst) || !num_failed) return cudaErrorInvalidValue;
  if (src->dim != dst->dim || src->num_slots != dst->num_slots) return cudaErrorInvalidValue;
  cudaError_t err = cudaMemsetAsync(num_failed, 0, sizeof(int64_t), stream);
  if (err != cudaSuccess) return err;
  return Run(RehashKernel, src->capacity, stream, *src, *dst, min_last_seen, num_failed);
}
