// GPU functor of SokLiteDynamicApply (kernel class in kernels/tf/hash_table_kernels.h): a row-wise
// optimizer step on the stored rows of a device hash table and on their in-table slots.
// Gradients of repeated keys are summed, every stored row is updated once, keys without a row
// are skipped, and updated rows record the step. Nothing is copied back to the host.
#include <vector>

#include "kernels/core/optimizer.h"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/hash_table_kernels.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "kernels/tf_gpu/hash_table_resource_gpu.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

using ::tensorflow::Tensor;

template <>
absl::Status DynamicApplyFunctor<GPUDevice>::Compute(tensorflow::OpKernelContext* ctx,
                                                     DynamicTableGpuResource* t, OptimizerKind kind,
                                                     const OptimizerHyper& hyper,
                                                     const Tensor& keys, const Tensor& grads,
                                                     int64_t step) {
  const int64_t n = keys.NumElements();
  if (n == 0) return absl::OkStatus();
  const int64_t dim = t->dim();
  cudaStream_t stream = OpStream(ctx);
  const SokLiteCudaTable& table = t->table();

  // Slot of every key (-1: no stored row), then the distinct slots. Entries past the distinct
  // count stay -1, so the update and the step marks can run over all n without knowing it.
  Tensor slots_t, distinct_t, inverse_t, count_t, workspace_t, summed_t;
  int64_t *slots = nullptr, *distinct = nullptr, *count = nullptr;
  int32_t* inverse = nullptr;
  uint8_t* workspace = nullptr;
  float* summed = nullptr;
  size_t bytes = 0;
  TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, n, &slots_t, &slots));
  TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, n, &distinct_t, &distinct));
  TF_RETURN_IF_ERROR(DeviceTemp<int32_t>(ctx, n, &inverse_t, &inverse));
  TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, 1, &count_t, &count));
  TF_RETURN_IF_ERROR(CudaStatus(sok_lite_cuda_unique_workspace_size(n, &bytes), "unique"));
  TF_RETURN_IF_ERROR(DeviceTemp<uint8_t>(ctx, bytes, &workspace_t, &workspace));
  TF_RETURN_IF_ERROR(DeviceTemp<float>(ctx, n * dim, &summed_t, &summed));
  TF_RETURN_IF_ERROR(CudaStatus(
      sok_lite_cuda_table_find(&table, keys.flat<int64_t>().data(), n, slots, nullptr, stream),
      "table_find"));
  TF_RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(distinct, 0xff, n * sizeof(int64_t), stream),
                                "fill distinct slots"));
  TF_RETURN_IF_ERROR(CudaStatus(sok_lite_cuda_unique_ids(slots, n, distinct, inverse, nullptr,
                                                         count, workspace, bytes, stream),
                                "unique_ids"));
  // Sum the gradients of repeated keys: every stored row is then updated exactly once.
  TF_RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(summed, 0, n * dim * sizeof(float), stream), "zero gradients"));
  TF_RETURN_IF_ERROR(CudaStatus(
      sok_lite_cuda_scatter_add_rows(grads.flat<float>().data(), dim, inverse, n, summed, stream),
      "scatter_add_rows"));
  std::vector<float*> slot_rows(table.slots, table.slots + table.num_slots);
  TF_RETURN_IF_ERROR(CudaStatus(
      sok_lite_cuda_apply_rows(static_cast<int>(kind), hyper.lr, hyper.weight_decay, hyper.p.data(),
                               static_cast<int>(hyper.p.size()), dim, distinct, summed, n,
                               table.values, slot_rows.data(), table.num_slots, stream),
      "apply_rows"));
  return CudaStatus(sok_lite_cuda_table_mark_updated(&table, distinct, n, step, stream),
                    "table_mark_updated");
}

REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicApply")
                            .Device(::tensorflow::DEVICE_GPU)
                            .HostMemory("hyper")
                            .HostMemory("step"),
                        DynamicApplyOp<GPUDevice>);

}  // namespace sok_lite
