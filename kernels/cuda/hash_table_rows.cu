// Row-level launchers of the device hash table for the TF op kernels: counting and exporting
// rows changed since a step (the CPU table's incremental dump), recording optimizer steps,
// storing given rows (assign / restore) and laying out a new optimizer slot. Rows are exported
// and stored in the CPU table's layout: the value row, then each optimizer slot row.
#include <climits>
#include <cuda/atomic>

#include "kernels/cuda/hash_table_state.cuh"
#include "kernels/cuda/launch_config.cuh"
#include "kernels/cuda/sok_lite_cuda.h"

namespace sok_lite {
namespace cuda {
namespace {

using CountRef = ::cuda::atomic_ref<int64_t, ::cuda::thread_scope_device>;

__device__ __forceinline__ bool Selected(const SokLiteCudaTable& t, int64_t p, int64_t since) {
  return t.state[p] == kPresent && (since == INT64_MIN || t.updated[p] > since);
}

__global__ void CountSinceKernel(SokLiteCudaTable t, int64_t since, int64_t* count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t mine = 0;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < t.capacity;
       p += stride) {
    mine += Selected(t, p, since);
  }
  if (mine > 0) CountRef(*count).fetch_add(mine, ::cuda::memory_order_relaxed);
}

// One thread per selected slot claims an output row and copies value then slots into it.
__global__ void ExportRowsKernel(SokLiteCudaTable t, int64_t since, int num_slots, int64_t max_out,
                                 int64_t* __restrict__ keys_out, float* __restrict__ rows_out,
                                 int64_t* count) {
  const int64_t dim = t.dim, width = dim * (1 + num_slots);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < t.capacity;
       p += stride) {
    if (!Selected(t, p, since)) continue;
    const int64_t at = CountRef(*count).fetch_add(1, ::cuda::memory_order_relaxed);
    if (at >= max_out) continue;
    keys_out[at] = t.keys[p];
    float* row = rows_out + at * width;
    for (int64_t c = 0; c < dim; ++c) row[c] = t.values[p * dim + c];
    for (int j = 0; j < num_slots; ++j) {
      for (int64_t c = 0; c < dim; ++c) row[(j + 1) * dim + c] = t.slots[j][p * dim + c];
    }
  }
}

__global__ void MarkUpdatedKernel(SokLiteCudaTable t, const int64_t* __restrict__ slots, int64_t n,
                                  int64_t step) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    if (slots[i] >= 0) t.updated[slots[i]] = step;
  }
}

// One thread per stored value: x runs over [n, width] of the input rows.
__global__ void StoreRowsKernel(SokLiteCudaTable t, const int64_t* __restrict__ slots, int64_t n,
                                const float* __restrict__ rows, int num_slots) {
  const int64_t dim = t.dim, width = dim * (1 + num_slots), total = n * width;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; x < total;
       x += stride) {
    const int64_t i = x / width, part = (x % width) / dim, c = x % dim, slot = slots[i];
    if (slot < 0) continue;
    float* dst = part == 0 ? t.values : t.slots[part - 1];
    dst[slot * dim + c] = rows[x];
  }
}

__global__ void FillKernel(float* out, int64_t total, float value) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t x = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; x < total;
       x += stride) {
    out[x] = value;
  }
}

template <typename Kernel, typename... Args>
cudaError_t Run(Kernel kernel, int64_t threads, cudaStream_t stream, Args... args) {
  int grid = 0;
  cudaError_t err = GridFor(kernel, threads, &grid);
  if (err != cudaSuccess) return err;
  kernel<<<grid, kBlockThreads, 0, stream>>>(args...);
  return cudaGetLastError();
}

// A filter on `updated` needs the table to track it.
bool ValidSince(const SokLiteCudaTable* t, int64_t since) {
  return Valid(t) && (since == INT64_MIN || t->updated);
}

}  // namespace
}  // namespace cuda
}  // namespace sok_lite

extern "C" cudaError_t sok_lite_cuda_table_count_since(const SokLiteCudaTable* table,
                                                       int64_t since_step, int64_t* count,
                                                       cudaStream_t stream) {
  using namespace sok_lite::cuda;
  if (!ValidSince(table, since_step) || !count) return cudaErrorInvalidValue;
  cudaError_t err = cudaMemsetAsync(count, 0, sizeof(int64_t), stream);
  if (err != cudaSuccess) return err;
  return Run(CountSinceKernel, table->capacity, stream, *table, since_step, count);
}

extern "C" cudaError_t sok_lite_cuda_table_export_rows(const SokLiteCudaTable* table,
                                                       int64_t since_step, int with_slots,
                                                       int64_t max_out, int64_t* keys_out,
                                                       float* rows_out, int64_t* count,
                                                       cudaStream_t stream) {
  using namespace sok_lite::cuda;
  if (!ValidSince(table, since_step) || max_out < 0 || !count) return cudaErrorInvalidValue;
  if (max_out > 0 && (!keys_out || !rows_out)) return cudaErrorInvalidValue;
  cudaError_t err = cudaMemsetAsync(count, 0, sizeof(int64_t), stream);
  if (err != cudaSuccess) return err;
  const int num_slots = with_slots ? table->num_slots : 0;
  return Run(ExportRowsKernel, table->capacity, stream, *table, since_step, num_slots, max_out,
             keys_out, rows_out, count);
}

extern "C" cudaError_t sok_lite_cuda_table_mark_updated(const SokLiteCudaTable* table,
                                                        const int64_t* slots, int64_t n,
                                                        int64_t step, cudaStream_t stream) {
  using namespace sok_lite::cuda;
  if (!Valid(table) || !table->updated || n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!slots) return cudaErrorInvalidValue;
  return Run(MarkUpdatedKernel, n, stream, *table, slots, n, step);
}

extern "C" cudaError_t sok_lite_cuda_table_store_rows(const SokLiteCudaTable* table,
                                                      const int64_t* slots, int64_t n,
                                                      const float* rows, int with_slots,
                                                      cudaStream_t stream) {
  using namespace sok_lite::cuda;
  if (!Valid(table) || n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (!slots || !rows) return cudaErrorInvalidValue;
  const int num_slots = with_slots ? table->num_slots : 0;
  return Run(StoreRowsKernel, n * table->dim * (1 + num_slots), stream, *table, slots, n, rows,
             num_slots);
}

extern "C" cudaError_t sok_lite_cuda_table_fill_slot(const SokLiteCudaTable* table, int j,
                                                     float value, cudaStream_t stream) {
  using namespace sok_lite::cuda;
  if (!Valid(table) || j < 0 || j >= table->num_slots) return cudaErrorInvalidValue;
  const int64_t total = table->capacity * table->dim;
  return Run(FillKernel, total, stream, table->slots[j], total, value);
}
