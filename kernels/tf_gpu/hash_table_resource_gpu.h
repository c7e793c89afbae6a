// The TF resource that holds a DynamicVariable's hash table in device memory (a SokLiteCudaTable
// over arrays owned as TF tensors). Created by the GPU kernel of SokLiteDynamicTable; its handle
// carries this type and the GPU device, so only the GPU kernels of the table ops accept it.
#ifndef SOK_LITE_KERNELS_TF_GPU_HASH_TABLE_RESOURCE_GPU_H_
#define SOK_LITE_KERNELS_TF_GPU_HASH_TABLE_RESOURCE_GPU_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/hash_table_kernels.h"
#include "kernels/tf/table_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_base.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/mutex.h"

namespace sok_lite {

// The optimizer slot arrays a device table can hold (SokLiteCudaTable::slots).
constexpr int kMaxDeviceSlots = 3;

class DynamicTableGpuResource : public tensorflow::ResourceBase {
 public:
  DynamicTableGpuResource(int64_t dim, const SokLiteCudaRowInit& init) : dim_(dim), init_(init) {}
  std::string DebugString() const override { return "SokLiteDynamicTable (GPU)"; }

  tensorflow::mutex mu;

  // Everything below requires mu (shared for the const readers and Size).
  // Allocates the first, empty table; called once, by the op that creates the resource.
  absl::Status Initialize(tensorflow::OpKernelContext* ctx);
  const SokLiteCudaTable& table() const { return storage_.view; }
  int64_t dim() const { return dim_; }
  int num_slots() const { return storage_.view.num_slots; }
  // Floats per exported row with slots: the value, then each slot (as HashTable::stride).
  int64_t stride() const { return dim_ * (1 + num_slots()); }
  // Lookup steps so far (HashTable::step): the last_seen clock of eviction.
  int64_t step() const { return step_; }
  int64_t NextStep() { return ++step_; }

  // sok_lite_cuda_table_find_or_insert of keys[0, n) at lookup step `step`; when keys find no
  // room, grows the table (rehash into a larger one) and repeats the call, which then inserts
  // only what is missing. One wait, for the failure count and the size; two after a growth.
  absl::Status FindOrInsert(tensorflow::OpKernelContext* ctx, const int64_t* keys, int64_t n,
                            int64_t step, int64_t* slots_out, float* values_out);

  // Lays out optimizer slots after the existing ones; every stored row starts them from
  // `initial_values` (HashTable::AddSlots).
  absl::Status AddSlots(tensorflow::OpKernelContext* ctx, const std::vector<float>& initial_values);
  // The values new keys' slots start from (one per slot).
  void SetSlotInit(const std::vector<float>& initial_values);

  // Removes the rows whose last lookup step is below min_last_seen (a rebuild into a table of
  // the same capacity); *evicted = how many. One wait.
  absl::Status Evict(tensorflow::OpKernelContext* ctx, int64_t min_last_seen, int64_t* evicted);

  // Removes every row; the capacity, slot layout and step counter stay.
  absl::Status Clear(tensorflow::OpKernelContext* ctx);

 private:
  // Device arrays of one table; `view` points into them.
  struct Storage {
    tensorflow::Tensor keys, state, last_seen, updated, values, size;
    tensorflow::Tensor slots[kMaxDeviceSlots];
    SokLiteCudaTable view = {};
  };

  // An empty table of `capacity` slots with this table's row width and slot layout.
  absl::Status Allocate(tensorflow::OpKernelContext* ctx, int64_t capacity, Storage* out) const;
  // Rebuilds into a table whose max_size is at least `needed` (at least twice the capacity).
  absl::Status Grow(tensorflow::OpKernelContext* ctx, int64_t needed);

  int64_t dim_;
  SokLiteCudaRowInit init_;
  Storage storage_;
  int64_t step_ = 0;
};

// The shared kernels (kernels/tf/hash_table_kernels.h) on a device table: no capacity eviction or
// admission counting, at most kMaxDeviceSlots slots, and fewer than 2^31 keys per optimizer step
// (the deduplication's inverse indices are int32).
template <>
struct DynamicTableTraits<GPUDevice> {
  using Table = DynamicTableGpuResource;
  static constexpr bool kPolicies = false;
  static constexpr int64_t kMaxSlots = kMaxDeviceSlots;
  static constexpr int64_t kMaxStepKeys = int64_t{1} << 31;
};

// The device table named by the resource handle at input `i` (an error for a handle of another
// type or device, e.g. a CPU table).
inline absl::Status LookupDeviceTable(
    tensorflow::OpKernelContext* ctx, int i,
    tensorflow::core::RefCountPtr<DynamicTableGpuResource>* table) {
  return tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, i), table);
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_GPU_HASH_TABLE_RESOURCE_GPU_H_
