// Storage management of the device hash table: allocation, growth, eviction and slot layout.
// Every table change is a launch on the op's stream; old arrays are released as TF tensors,
// which the GPU allocator reuses only in stream order.
#include "kernels/tf_gpu/hash_table_resource_gpu.h"

#include <climits>

#include "kernels/tf_gpu/gpu_util.h"

namespace sok_lite {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
namespace errors = ::tensorflow::errors;

namespace {

// As the CPU table's hash index: starts at 16 slots, grows when 3/4 full. Here a slot is also
// the row, so the load factor bounds the unused row memory as well as the probe length.
constexpr int64_t kInitialCapacity = 16;
int64_t MaxSize(int64_t capacity) { return capacity - capacity / 4; }

}  // namespace

absl::Status DynamicTableGpuResource::Allocate(OpKernelContext* ctx, int64_t capacity,
                                               Storage* out) const {
  if (capacity > (int64_t{1} << 40) || capacity > (int64_t{1} << 60) / dim_) {
    return errors::ResourceExhausted("hash table of ", capacity, " rows of width ", dim_,
                                     " is too large");
  }
  SokLiteCudaTable& v = out->view;
  v = table();  // slot layout and initial values
  int64_t* size = nullptr;
  TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, capacity, &out->keys, &v.keys));
  TF_RETURN_IF_ERROR(DeviceTemp<int32_t>(ctx, capacity, &out->state, &v.state));
  TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, capacity, &out->last_seen, &v.last_seen));
  TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, capacity, &out->updated, &v.updated));
  TF_RETURN_IF_ERROR(DeviceTemp<float>(ctx, capacity * dim_, &out->values, &v.values));
  TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, 1, &out->size, &size));
  for (int j = 0; j < v.num_slots; ++j) {
    TF_RETURN_IF_ERROR(DeviceTemp<float>(ctx, capacity * dim_, &out->slots[j], &v.slots[j]));
  }
  v.size = size;
  v.dim = dim_;
  v.capacity = capacity;
  v.max_size = MaxSize(capacity);
  return CudaStatus(sok_lite_cuda_table_clear(&v, OpStream(ctx)), "table_clear");
}

absl::Status DynamicTableGpuResource::Initialize(OpKernelContext* ctx) {
  storage_.view.num_slots = 0;
  return Allocate(ctx, kInitialCapacity, &storage_);
}

absl::Status DynamicTableGpuResource::Grow(OpKernelContext* ctx, int64_t needed) {
  int64_t capacity = table().capacity * 2;
  while (MaxSize(capacity) < needed && capacity <= (int64_t{1} << 40)) capacity *= 2;
  Storage bigger;
  TF_RETURN_IF_ERROR(Allocate(ctx, capacity, &bigger));
  // Every key fits (max_size >= needed > size), so the failure count is not read back.
  Tensor failed_t;
  int64_t* failed = nullptr;
  TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, 1, &failed_t, &failed));
  TF_RETURN_IF_ERROR(CudaStatus(
      sok_lite_cuda_table_rehash(&storage_.view, &bigger.view, INT64_MIN, failed, OpStream(ctx)),
      "table_rehash"));
  storage_ = std::move(bigger);
  return absl::OkStatus();
}

absl::Status DynamicTableGpuResource::FindOrInsert(OpKernelContext* ctx, const int64_t* keys,
                                                   int64_t n, int64_t step, int64_t* slots_out,
                                                   float* values_out) {
  if (n == 0) return absl::OkStatus();
  cudaStream_t stream = OpStream(ctx);
  Tensor counts_t;  // [keys without room, size]
  int64_t* counts = nullptr;
  TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, 2, &counts_t, &counts));
  for (int attempt = 0;; ++attempt) {
    TF_RETURN_IF_ERROR(
        CudaStatus(sok_lite_cuda_table_find_or_insert(&storage_.view, &init_, keys, n, step,
                                                      slots_out, values_out, counts, stream),
                   "table_find_or_insert"));
    TF_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(counts + 1, table().size, sizeof(int64_t),
                                                  cudaMemcpyDeviceToDevice, stream),
                                  "size copy"));
    std::vector<int64_t> host;
    TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, counts, 2, &host));
    if (host[0] == 0) return absl::OkStatus();
    if (attempt > 0) {
      return errors::Internal("hash table: ", host[0], " keys found no room after growth");
    }
    // Failures count positions, so a key repeated in `keys` may be counted more than once:
    // the growth may overshoot, never fall short.
    TF_RETURN_IF_ERROR(Grow(ctx, host[1] + host[0]));
  }
}

absl::Status DynamicTableGpuResource::AddSlots(OpKernelContext* ctx,
                                               const std::vector<float>& initial_values) {
  SokLiteCudaTable& v = storage_.view;
  const int total = v.num_slots + static_cast<int>(initial_values.size());
  if (total > kMaxDeviceSlots) {
    return errors::InvalidArgument("hash table: ", total, " optimizer slots; a GPU table holds ",
                                   "at most ", kMaxDeviceSlots);
  }
  for (float value : initial_values) {
    const int j = v.num_slots;
    TF_RETURN_IF_ERROR(DeviceTemp<float>(ctx, v.capacity * dim_, &storage_.slots[j], &v.slots[j]));
    v.slot_init[j] = value;
    v.num_slots = j + 1;
    TF_RETURN_IF_ERROR(
        CudaStatus(sok_lite_cuda_table_fill_slot(&v, j, value, OpStream(ctx)), "table_fill_slot"));
  }
  return absl::OkStatus();
}

void DynamicTableGpuResource::SetSlotInit(const std::vector<float>& initial_values) {
  for (int j = 0; j < num_slots() && j < static_cast<int>(initial_values.size()); ++j) {
    storage_.view.slot_init[j] = initial_values[j];
  }
}

absl::Status DynamicTableGpuResource::Evict(OpKernelContext* ctx, int64_t min_last_seen,
                                            int64_t* evicted) {
  cudaStream_t stream = OpStream(ctx);
  Storage kept;
  TF_RETURN_IF_ERROR(Allocate(ctx, table().capacity, &kept));
  Tensor counts_t;  // [keys without room (none: same capacity), size before, size after]
  int64_t* counts = nullptr;
  TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, 3, &counts_t, &counts));
  TF_RETURN_IF_ERROR(CudaStatus(
      sok_lite_cuda_table_rehash(&storage_.view, &kept.view, min_last_seen, counts, stream),
      "table_rehash"));
  TF_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(counts + 1, table().size, sizeof(int64_t), cudaMemcpyDeviceToDevice, stream),
      "size copy"));
  TF_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(counts + 2, kept.view.size, sizeof(int64_t),
                                                cudaMemcpyDeviceToDevice, stream),
                                "size copy"));
  std::vector<int64_t> host;
  TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, counts, 3, &host));
  *evicted = host[1] - host[2];
  storage_ = std::move(kept);
  return absl::OkStatus();
}

absl::Status DynamicTableGpuResource::Clear(OpKernelContext* ctx) {
  return CudaStatus(sok_lite_cuda_table_clear(&storage_.view, OpStream(ctx)), "table_clear");
}

}  // namespace sok_lite
