// GPU functors of the dynamic (hash) table family over the device table
// (kernels/tf_gpu/hash_table_resource_gpu.h) and the kernels/cuda launchers, and the DEVICE_GPU
// registrations of the shared kernels (kernels/tf/hash_table_kernels.h); SokLiteDynamicApply's
// functor is in hash_table_apply_gpu.cc. The GPU table has no admission counting and no capacity
// eviction (the shared table kernel refuses a table that asks for either).
#include <climits>
#include <string>
#include <vector>

#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/hash_table_kernels.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "kernels/tf_gpu/hash_table_resource_gpu.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

using ::tensorflow::DEVICE_GPU;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

template <>
absl::Status DynamicCreateFunctor<GPUDevice>::Compute(OpKernelContext* ctx,
                                                      const TableConfig& config,
                                                      DynamicTableGpuResource** out) {
  // SokLiteCudaInitKind has InitKind's order.
  const SokLiteCudaRowInit init = {static_cast<int>(config.init.kind), config.init.seed,
                                   config.init.a, config.init.b};
  auto* created = new DynamicTableGpuResource(config.dim, init);
  absl::Status s;
  {
    tensorflow::mutex_lock lock(created->mu);
    s = created->Initialize(ctx);
  }
  if (!s.ok()) {  // not registered: release it here
    created->Unref();
    return s;
  }
  *out = created;
  return s;
}

template <>
absl::Status DynamicLookupFunctor<GPUDevice>::Compute(OpKernelContext* ctx,
                                                      DynamicTableGpuResource* t,
                                                      const int64_t* keys, int64_t n, float* out,
                                                      std::string*) {
  Tensor slots_t;
  int64_t* slots = nullptr;
  TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, n, &slots_t, &slots));
  const int64_t step = t->NextStep();
  return t->FindOrInsert(ctx, keys, n, step, slots, out);
}

// Count leaves the row count on the device in `state`, which the export launcher reads again.
// One wait, for the row count.
template <>
absl::Status DynamicExportFunctor<GPUDevice>::Count(OpKernelContext* ctx,
                                                    DynamicTableGpuResource* t, int64_t since,
                                                    int64_t* n) {
  const SokLiteCudaTable& table = t->table();
  cudaStream_t stream = OpStream(ctx);
  int64_t* count = nullptr;
  TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, 1, &state, &count));
  if (since == INT64_MIN) {  // every row: the size the table already keeps
    TF_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(count, table.size, sizeof(int64_t), cudaMemcpyDeviceToDevice, stream),
        "size copy"));
  } else {
    TF_RETURN_IF_ERROR(CudaStatus(sok_lite_cuda_table_count_since(&table, since, count, stream),
                                  "table_count_since"));
  }
  std::vector<int64_t> host;
  TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, count, 1, &host));
  *n = host[0];
  return absl::OkStatus();
}

template <>
absl::Status DynamicExportFunctor<GPUDevice>::Export(OpKernelContext* ctx,
                                                     DynamicTableGpuResource* t, int64_t since,
                                                     bool with_slots, int64_t n, int64_t* keys,
                                                     float* values) {
  if (n == 0) return absl::OkStatus();
  return CudaStatus(sok_lite_cuda_table_export_rows(&t->table(), since, with_slots, n, keys, values,
                                                    state.flat<int64_t>().data(), OpStream(ctx)),
                    "table_export_rows");
}

template <>
absl::Status DynamicAssignFunctor<GPUDevice>::Compute(OpKernelContext* ctx,
                                                      DynamicTableGpuResource* t,
                                                      const int64_t* keys, int64_t n,
                                                      const float* values, bool with_slots,
                                                      int64_t step) {
  if (n == 0) return absl::OkStatus();
  Tensor slots_t;
  int64_t* slots = nullptr;
  TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, n, &slots_t, &slots));
  // Inserted keys get the current lookup step as last seen, as on the CPU; no step passes.
  TF_RETURN_IF_ERROR(t->FindOrInsert(ctx, keys, n, t->step(), slots, nullptr));
  const SokLiteCudaTable& table = t->table();
  cudaStream_t stream = OpStream(ctx);
  TF_RETURN_IF_ERROR(
      CudaStatus(sok_lite_cuda_table_store_rows(&table, slots, n, values, with_slots, stream),
                 "table_store_rows"));
  return CudaStatus(sok_lite_cuda_table_mark_updated(&table, slots, n, step, stream),
                    "table_mark_updated");
}

// The size is copied on the device: no wait.
template <>
absl::Status DynamicMaintenanceFunctor<GPUDevice>::Size(OpKernelContext* ctx,
                                                        DynamicTableGpuResource* t, Tensor* out) {
  return CudaStatus(cudaMemcpyAsync(out->flat<int64_t>().data(), t->table().size, sizeof(int64_t),
                                    cudaMemcpyDeviceToDevice, OpStream(ctx)),
                    "size copy");
}

template <>
absl::Status DynamicMaintenanceFunctor<GPUDevice>::Evict(OpKernelContext* ctx,
                                                         DynamicTableGpuResource* t, int64_t steps,
                                                         int64_t* evicted) {
  // The CPU removes rows with step - last_seen >= steps, so the kept ones have
  // last_seen >= step - steps + 1 (steps >= 1: no overflow).
  return t->Evict(ctx, t->step() - steps + 1, evicted);
}

template <>
absl::Status DynamicMaintenanceFunctor<GPUDevice>::Clear(OpKernelContext* ctx,
                                                         DynamicTableGpuResource* t) {
  return t->Clear(ctx);
}

REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicTable").Device(DEVICE_GPU), DynamicTableOp<GPUDevice>);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicLookup").Device(DEVICE_GPU),
                        DynamicLookupOp<GPUDevice>);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicExport").Device(DEVICE_GPU).HostMemory("since_step"),
                        DynamicExportOp<GPUDevice>);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicAssign").Device(DEVICE_GPU).HostMemory("step"),
                        DynamicAssignOp<GPUDevice>);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicSize").Device(DEVICE_GPU), DynamicSizeOp<GPUDevice>);
REGISTER_KERNEL_BUILDER(
    Name("SokLiteDynamicEvict").Device(DEVICE_GPU).HostMemory("steps_unseen").HostMemory("evicted"),
    DynamicEvictOp<GPUDevice>);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicClear").Device(DEVICE_GPU), DynamicClearOp<GPUDevice>);

}  // namespace sok_lite
