// GPU kernels of the lookup family (ops registered in kernels/tf/lookup_ops.cc), float32 only.
// Each op launches the kernels/cuda launchers on the op's stream and waits once, for a small
// copy of its device-side checks (and, for the unique ids, their count).
#include <string>
#include <vector>

#include "kernels/core/combine.h"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/kernel_args.h"
#include "kernels/tf/table_util.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "kernels/tf_gpu/ragged_checks.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"

namespace sok_lite {

using ::tensorflow::DEVICE_GPU;
using ::tensorflow::OpInputList;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;

namespace {

// Combiners are read by the CPU's ReadCombiners (kernel_args.h); SokLiteCudaCombiner has
// Combiner's order.
static_assert(static_cast<int>(Combiner::kSum) == SOK_LITE_CUDA_SUM &&
                  static_cast<int>(Combiner::kMean) == SOK_LITE_CUDA_MEAN &&
                  static_cast<int>(Combiner::kSqrtn) == SOK_LITE_CUDA_SQRTN,
              "the CUDA combiner codes follow kernels/core/combine.h");

// Device-side checks of table t's segments (inverse, row_splits, weights at input offsets
// n_tables * {1, 2, 3} + t) against num_unique rows; waits for their outcome.
absl::Status CheckSegments(OpKernelContext* ctx, int n_tables, int t, int64_t num_unique) {
  const Tensor& inverse = ctx->input(n_tables + t);
  const Tensor& splits = ctx->input(2 * n_tables + t);
  const Tensor& weights = ctx->input(3 * n_tables + t);
  const std::string label = TableLabel({}, t);
  if (splits.NumElements() < 1) {
    return errors::InvalidArgument(label, ": row_splits must have at least 1 entry");
  }
  const int64_t n = inverse.NumElements();
  if (weights.NumElements() != 0 && weights.NumElements() != n) {
    return errors::InvalidArgument(label, ": weights have ", weights.NumElements(), " entries for ",
                                   n, " ids");
  }
  Tensor bad_t;
  uint64_t* bad = nullptr;
  TF_RETURN_IF_ERROR(DeviceTemp<uint64_t>(ctx, kRaggedChecks, &bad_t, &bad));
  TF_RETURN_IF_ERROR(
      CudaStatus(sok_lite_cuda_check_ragged(splits.flat<int64_t>().data(), splits.NumElements() - 1,
                                            n, nullptr, -1, 0, inverse.flat<int32_t>().data(),
                                            num_unique, bad, OpStream(ctx)),
                 "check_ragged"));
  std::vector<uint64_t> host;
  TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, bad, kRaggedChecks, &host));
  const std::string problem = RaggedProblem(host.data(), -1, 0, num_unique);
  if (!problem.empty()) return errors::InvalidArgument(label, ": ", problem);
  return absl::OkStatus();
}

const float* OptionalWeights(const Tensor& weights) {
  return weights.NumElements() == 0 ? nullptr : weights.flat<float>().data();
}

}  // namespace

class UniqueIdsGpuOp : public OpKernel {
 public:
  explicit UniqueIdsGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, args_.Read(ctx));
  }

  void Compute(OpKernelContext* ctx) override {
    OpInputList ids, splits;
    OP_REQUIRES_OK(ctx, ctx->input_list("ids", &ids));
    OP_REQUIRES_OK(ctx, ctx->input_list("row_splits", &splits));
    const int n_tables = ids.size();
    cudaStream_t stream = OpStream(ctx);
    // Per table: checks and unique ids into scratch, then ONE wait for all tables' results
    // (kRaggedChecks check values + the unique count, per table).
    constexpr int kPerTable = kRaggedChecks + 1;
    Tensor results_t;
    uint64_t* results = nullptr;
    OP_REQUIRES_OK(ctx, DeviceTemp<uint64_t>(ctx, n_tables * kPerTable, &results_t, &results));
    std::vector<Tensor> uniques(n_tables);
    for (int t = 0; t < n_tables; ++t) {
      const std::string label = TableLabel(args_.names, t);
      const int64_t n = ids[t].NumElements();
      OP_REQUIRES(ctx, n < (int64_t{1} << 31),
                  errors::InvalidArgument(label, ": more than 2^31 ids"));
      OP_REQUIRES(ctx, splits[t].NumElements() >= 1,
                  errors::InvalidArgument(label, ": row_splits must have at least 1 entry"));
      const int64_t* id = ids[t].flat<int64_t>().data();
      uint64_t* bad = results + t * kPerTable;
      OP_REQUIRES_OK(
          ctx, CudaStatus(sok_lite_cuda_check_ragged(
                              splits[t].flat<int64_t>().data(), splits[t].NumElements() - 1, n, id,
                              args_.num_rows[t], args_.hotness[t], nullptr, 0, bad, stream),
                          "check_ragged"));
      Tensor* inverse = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(n_tables + t, ids[t].shape(), &inverse));
      int64_t* unique = nullptr;
      OP_REQUIRES_OK(ctx, DeviceTemp<int64_t>(ctx, n, &uniques[t], &unique));
      size_t bytes = 0;
      OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_unique_workspace_size(n, &bytes), "unique"));
      Tensor workspace_t;
      uint8_t* workspace = nullptr;
      OP_REQUIRES_OK(ctx, DeviceTemp<uint8_t>(ctx, bytes, &workspace_t, &workspace));
      // Unchecked ids are still safe to deduplicate: any int64 value is a valid key.
      OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_unique_ids(
                                         id, n, unique, inverse->flat<int32_t>().data(), nullptr,
                                         reinterpret_cast<int64_t*>(bad + kRaggedChecks), workspace,
                                         bytes, stream),
                                     "unique_ids"));
    }
    std::vector<uint64_t> host;
    OP_REQUIRES_OK(ctx, CopyToHostAndWait(ctx, results, n_tables * kPerTable, &host));
    for (int t = 0; t < n_tables; ++t) {
      const std::string problem =
          RaggedProblem(host.data() + t * kPerTable, args_.num_rows[t], args_.hotness[t], 0);
      OP_REQUIRES(ctx, problem.empty(),
                  errors::InvalidArgument(TableLabel(args_.names, t), ": ", problem));
    }
    for (int t = 0; t < n_tables; ++t) {
      const int64_t u = static_cast<int64_t>(host[t * kPerTable + kRaggedChecks]);
      Tensor* unique = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(t, TensorShape({u}), &unique));
      if (u == 0) continue;
      OP_REQUIRES_OK(
          ctx, CudaStatus(cudaMemcpyAsync(unique->flat<int64_t>().data(),
                                          uniques[t].flat<int64_t>().data(), u * sizeof(int64_t),
                                          cudaMemcpyDeviceToDevice, stream),
                          "unique copy"));
    }
  }

 private:
  UniqueIdsArgs args_;
};

class GatherRowsGpuOp : public OpKernel {
 public:
  explicit GatherRowsGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_names", &names_));
  }

  void Compute(OpKernelContext* ctx) override {
    const int n_tables = num_inputs() / 2;
    cudaStream_t stream = OpStream(ctx);
    for (int t = 0; t < n_tables; ++t) {
      const std::string label = TableLabel(names_, t);
      tensorflow::core::RefCountPtr<tensorflow::Var> var;
      OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, t), &var));
      // In place under a shared lock, as the CPU kernel; later writers run on the same stream.
      tensorflow::tf_shared_lock lock(*var->mu());
      OP_REQUIRES_OK(ctx, CheckTable<float>(var.get(), label));
      const Tensor& table = *var->tensor();
      const int64_t num_rows = table.dim_size(0), dim = table.dim_size(1);
      const Tensor& indices = ctx->input(n_tables + t);
      const int64_t u = indices.NumElements();
      // The indices as one sample, so check_ragged checks their range.
      Tensor splits_t, bad_t;
      int64_t* splits = nullptr;
      uint64_t* bad = nullptr;
      OP_REQUIRES_OK(ctx, CopyToDevice<int64_t>(ctx, {0, u}, &splits_t, &splits));
      OP_REQUIRES_OK(ctx, DeviceTemp<uint64_t>(ctx, kRaggedChecks, &bad_t, &bad));
      const int64_t* idx = indices.flat<int64_t>().data();
      OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_check_ragged(splits, 1, u, idx, num_rows, 0,
                                                                nullptr, 0, bad, stream),
                                     "check_ragged"));
      std::vector<uint64_t> host;
      OP_REQUIRES_OK(ctx, CopyToHostAndWait(ctx, bad, kRaggedChecks, &host));
      const std::string problem = RaggedProblem(host.data(), num_rows, 0, 0);
      OP_REQUIRES(ctx, problem.empty(), errors::InvalidArgument(label, ": row ", problem));
      Tensor* rows = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(t, TensorShape({u, dim}), &rows));
      if (u == 0 || dim == 0) continue;
      OP_REQUIRES_OK(ctx,
                     CudaStatus(sok_lite_cuda_gather_rows(table.flat<float>().data(), dim, idx, u,
                                                          rows->flat<float>().data(), stream),
                                "gather_rows"));
    }
  }

 private:
  std::vector<std::string> names_;
};

class SegmentCombineGpuOp : public OpKernel {
 public:
  explicit SegmentCombineGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadCombiners(ctx, &combiners_));
  }

  void Compute(OpKernelContext* ctx) override {
    const int n_tables = num_inputs() / 4;
    OP_REQUIRES(ctx, static_cast<int>(combiners_.size()) == n_tables,
                errors::InvalidArgument("combiners need one entry per table"));
    cudaStream_t stream = OpStream(ctx);
    for (int t = 0; t < n_tables; ++t) {
      OP_REQUIRES_OK(ctx, RankInput(ctx, t, 2));
      const Tensor& rows = ctx->input(t);
      OP_REQUIRES_OK(ctx, CheckSegments(ctx, n_tables, t, rows.dim_size(0)));
      const Tensor& splits = ctx->input(2 * n_tables + t);
      const int64_t batch = splits.NumElements() - 1, dim = rows.dim_size(1);
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(t, TensorShape({batch, dim}), &out));
      if (batch == 0 || dim == 0) continue;
      const float* weights = OptionalWeights(ctx->input(3 * n_tables + t));
      const int64_t* rs = splits.flat<int64_t>().data();
      Tensor scale_t;
      float* scale = nullptr;
      OP_REQUIRES_OK(ctx, DeviceTemp<float>(ctx, batch, &scale_t, &scale));
      OP_REQUIRES_OK(
          ctx, CudaStatus(sok_lite_cuda_sample_scales(
                              rs, weights, batch, static_cast<int>(combiners_[t]), scale, stream),
                          "sample_scales"));
      OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_combine_forward(
                                         rows.flat<float>().data(), dim,
                                         ctx->input(n_tables + t).flat<int32_t>().data(), rs,
                                         weights, scale, batch, out->flat<float>().data(), stream),
                                     "combine_forward"));
    }
  }

 private:
  std::vector<Combiner> combiners_;
};

class SegmentCombineGradGpuOp : public OpKernel {
 public:
  explicit SegmentCombineGradGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadCombiners(ctx, &combiners_));
  }

  void Compute(OpKernelContext* ctx) override {
    const int n_tables = num_inputs() / 5;
    OP_REQUIRES(ctx, static_cast<int>(combiners_.size()) == n_tables,
                errors::InvalidArgument("combiners need one entry per table"));
    cudaStream_t stream = OpStream(ctx);
    for (int t = 0; t < n_tables; ++t) {
      OP_REQUIRES_OK(ctx, RankInput(ctx, t, 2));
      const Tensor& grads = ctx->input(t);
      int64_t num_unique = 0;
      OP_REQUIRES_OK(ctx, ScalarInput(ctx, 4 * n_tables + t, &num_unique));  // host memory
      OP_REQUIRES(ctx, num_unique >= 0 && num_unique <= (int64_t{1} << 31),
                  errors::InvalidArgument(TableLabel({}, t), ": num_unique ", num_unique,
                                          " is out of range"));
      OP_REQUIRES_OK(ctx, CheckSegments(ctx, n_tables, t, num_unique));
      const Tensor& splits = ctx->input(2 * n_tables + t);
      const int64_t batch = splits.NumElements() - 1, dim = grads.dim_size(1);
      OP_REQUIRES(ctx, grads.dim_size(0) == batch,
                  errors::InvalidArgument(TableLabel({}, t), ": gradient has ", grads.dim_size(0),
                                          " rows for a batch of ", batch));
      TensorShape out_shape;
      OP_REQUIRES_OK(ctx, SafeShape({num_unique, dim}, &out_shape));
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(t, out_shape, &out));
      if (num_unique == 0 || dim == 0) continue;
      const float* weights = OptionalWeights(ctx->input(3 * n_tables + t));
      const int64_t* rs = splits.flat<int64_t>().data();
      Tensor scale_t;
      float* scale = nullptr;
      OP_REQUIRES_OK(ctx, DeviceTemp<float>(ctx, batch, &scale_t, &scale));
      OP_REQUIRES_OK(
          ctx, CudaStatus(sok_lite_cuda_sample_scales(
                              rs, weights, batch, static_cast<int>(combiners_[t]), scale, stream),
                          "sample_scales"));
      OP_REQUIRES_OK(
          ctx, CudaStatus(sok_lite_cuda_combine_backward(
                              grads.flat<float>().data(), dim,
                              ctx->input(n_tables + t).flat<int32_t>().data(), rs, batch, weights,
                              scale, num_unique, out->flat<float>().data(), stream),
                          "combine_backward"));
    }
  }

 private:
  std::vector<Combiner> combiners_;
};

REGISTER_KERNEL_BUILDER(Name("SokLiteUniqueIds").Device(DEVICE_GPU), UniqueIdsGpuOp);
REGISTER_KERNEL_BUILDER(Name("SokLiteGatherRows").Device(DEVICE_GPU).TypeConstraint<float>("dtype"),
                        GatherRowsGpuOp);
REGISTER_KERNEL_BUILDER(
    Name("SokLiteSegmentCombine").Device(DEVICE_GPU).TypeConstraint<float>("dtype"),
    SegmentCombineGpuOp);
REGISTER_KERNEL_BUILDER(Name("SokLiteSegmentCombineGrad")
                            .Device(DEVICE_GPU)
                            .HostMemory("num_unique")
                            .TypeConstraint<float>("dtype"),
                        SegmentCombineGradGpuOp);

}  // namespace sok_lite
