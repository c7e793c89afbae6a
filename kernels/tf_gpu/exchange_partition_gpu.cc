// GPU functors of SokLitePartitionByOwner (kernel in kernels/tf/exchange_kernels.h): the id
// message of the distributed lookup, built on the device in the CPU kernel's layout and order.
#include <cstdint>
#include <vector>

#include "kernels/core/exchange.h"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/exchange_kernels.h"
#include "kernels/tf_gpu/check_segments_gpu.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

// Checked on the device, one wait for every table's outcome.
template <>
absl::Status PartitionByOwnerFunctor<GPUDevice>::FindNegativeId(
    OpKernelContext* ctx, const std::vector<const int64_t*>& ids, const std::vector<int64_t>& sizes,
    const std::vector<Owner>& owners, int64_t* table, int64_t* id) {
  *table = -1;
  const int64_t num_tables = ids.size();
  auto checked = [&](int64_t t) { return owners[t].localized_rank != Owner::kHashed && sizes[t]; };
  Tensor bad_t;
  uint64_t* bad = nullptr;
  TF_RETURN_IF_ERROR(DeviceTemp<uint64_t>(ctx, num_tables, &bad_t, &bad));
  bool any = false;
  for (int64_t t = 0; t < num_tables; ++t) {
    if (!checked(t)) continue;
    TF_RETURN_IF_ERROR(LaunchSegmentChecks(ctx, ids[t], {0}, {sizes[t]}, {-1}, bad + t));
    any = true;
  }
  if (!any) return absl::OkStatus();
  std::vector<uint64_t> host;
  TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, bad, num_tables, &host));
  for (int64_t t = 0; t < num_tables; ++t) {
    if (!checked(t) || host[t] == ~uint64_t{0}) continue;
    *table = t;
    return ValueAt(ctx, ids[t] + host[t], id);
  }
  return absl::OkStatus();
}

template <>
absl::Status PartitionByOwnerFunctor<GPUDevice>::Compute(
    OpKernelContext* ctx, const std::vector<const int64_t*>& ids, const std::vector<int64_t>& sizes,
    const std::vector<Owner>& owners, int64_t num_ranks, int64_t* counts, int64_t* message,
    int64_t* splits, int32_t* send_pos) {
  const int64_t num_tables = ids.size();
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  std::vector<int64_t> codes;  // the launcher's owner codes
  for (const Owner& o : owners) codes.push_back(o.localized_rank);
  size_t bytes = 0;
  TF_RETURN_IF_ERROR(
      CudaStatus(sok_lite_cuda_partition_workspace_size(total, num_ranks, num_tables, &bytes),
                 "partition workspace"));
  Tensor workspace_t;
  uint8_t* workspace = nullptr;
  TF_RETURN_IF_ERROR(DeviceTemp<uint8_t>(ctx, bytes, &workspace_t, &workspace));
  return CudaStatus(sok_lite_cuda_partition_by_owner(ids.data(), sizes.data(), codes.data(),
                                                     num_tables, num_ranks, counts, message, splits,
                                                     send_pos, workspace, bytes, OpStream(ctx)),
                    "partition_by_owner");
}

REGISTER_KERNEL_BUILDER(Name("SokLitePartitionByOwner").Device(::tensorflow::DEVICE_GPU),
                        PartitionByOwnerOp<GPUDevice>);

}  // namespace sok_lite
