// GPU kernel of SokLitePartitionByOwner (op registered in kernels/tf/exchange_ops.cc): the id
// message of the distributed lookup, built on the device in the CPU kernel's layout and order.
#include <cstdint>
#include <vector>

#include "kernels/core/exchange.h"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/kernel_args.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "kernels/tf_gpu/segment_checks.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

using ::tensorflow::OpInputList;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;

class PartitionByOwnerGpuOp : public OpKernel {
 public:
  explicit PartitionByOwnerGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::vector<Owner> owners;
    OP_REQUIRES_OK(ctx, ReadOwners(ctx, &num_ranks_, &owners));
    for (const Owner& o : owners) owners_.push_back(o.localized_rank);  // the launcher's codes
  }

  void Compute(OpKernelContext* ctx) override {
    OpInputList unique;
    OP_REQUIRES_OK(ctx, ctx->input_list("unique_ids", &unique));
    const int64_t num_tables = unique.size();
    OP_REQUIRES(ctx, static_cast<int64_t>(owners_.size()) == num_tables,
                errors::InvalidArgument("localized_ranks needs one entry per table"));
    std::vector<const int64_t*> ids(num_tables);
    std::vector<int64_t> sizes(num_tables);
    int64_t total = 0;
    for (int64_t t = 0; t < num_tables; ++t) {
      ids[t] = unique[t].flat<int64_t>().data();
      sizes[t] = unique[t].NumElements();
      total += sizes[t];
    }
    OP_REQUIRES_OK(ctx, CheckNonNegative(ctx, ids, sizes));
    OP_REQUIRES(ctx, total < (int64_t{1} << 31),
                errors::InvalidArgument("more than 2^31 unique ids in one lookup"));
    OP_REQUIRES(
        ctx, num_ranks_ <= (int64_t{1} << 20) && num_tables <= (int64_t{1} << 20),
        errors::InvalidArgument("too many ranks or tables: ", num_ranks_, " x ", num_tables));
    Tensor *message, *splits, *counts, *send_pos;
    OP_REQUIRES_OK(
        ctx, ctx->allocate_output(0, TensorShape({num_ranks_ * num_tables + total}), &message));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({num_ranks_}), &splits));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({num_ranks_ * num_tables}), &counts));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({total}), &send_pos));
    size_t bytes = 0;
    OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_partition_workspace_size(total, num_ranks_,
                                                                          num_tables, &bytes),
                                   "partition workspace"));
    Tensor workspace_t;
    uint8_t* workspace = nullptr;
    OP_REQUIRES_OK(ctx, DeviceTemp<uint8_t>(ctx, bytes, &workspace_t, &workspace));
    OP_REQUIRES_OK(ctx,
                   CudaStatus(sok_lite_cuda_partition_by_owner(
                                  ids.data(), sizes.data(), owners_.data(), num_tables, num_ranks_,
                                  counts->flat<int64_t>().data(), message->flat<int64_t>().data(),
                                  splits->flat<int64_t>().data(), send_pos->flat<int32_t>().data(),
                                  workspace, bytes, OpStream(ctx)),
                              "partition_by_owner"));
  }

 private:
  // Ids of non-hashed tables must be >= 0 (their owner is id % num_ranks): checked on the
  // device, one wait for every table's outcome.
  absl::Status CheckNonNegative(OpKernelContext* ctx, const std::vector<const int64_t*>& ids,
                                const std::vector<int64_t>& sizes) {
    const int64_t num_tables = ids.size();
    Tensor bad_t;
    uint64_t* bad = nullptr;
    TF_RETURN_IF_ERROR(DeviceTemp<uint64_t>(ctx, num_tables, &bad_t, &bad));
    bool any = false;
    for (int64_t t = 0; t < num_tables; ++t) {
      if (owners_[t] == Owner::kHashed || sizes[t] == 0) continue;
      TF_RETURN_IF_ERROR(LaunchSegmentChecks(ctx, ids[t], {0}, {sizes[t]}, {-1}, bad + t));
      any = true;
    }
    if (!any) return absl::OkStatus();
    std::vector<uint64_t> host;
    TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, bad, num_tables, &host));
    for (int64_t t = 0; t < num_tables; ++t) {
      if (owners_[t] == Owner::kHashed || sizes[t] == 0 || host[t] == ~uint64_t{0}) continue;
      int64_t id = 0;
      TF_RETURN_IF_ERROR(ValueAt(ctx, ids[t] + host[t], &id));
      return errors::InvalidArgument("table ", t, ": negative id ", id);
    }
    return absl::OkStatus();
  }

  int64_t num_ranks_ = 1;
  std::vector<int64_t> owners_;
};

REGISTER_KERNEL_BUILDER(Name("SokLitePartitionByOwner").Device(::tensorflow::DEVICE_GPU),
                        PartitionByOwnerGpuOp);

}  // namespace sok_lite
