// GPU kernels of the owner side of the exchange (ops registered in kernels/tf/exchange_ops.cc):
// SokLiteGatherForPeers answers a received id message from local static tables and device hash
// tables, and SokLiteReduceForOwner (its gradient) sums what the peers sent back per local row.
// Float32 only; the id message stays on the device, its split sizes are in host memory.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/exchange.h"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/table_util.h"
#include "kernels/tf_gpu/dynamic_peers_gpu.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "kernels/tf_gpu/id_message.h"
#include "kernels/tf_gpu/segment_checks.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"

namespace sok_lite {

using ::tensorflow::DEVICE_GPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::Var;
namespace errors = ::tensorflow::errors;

class GatherForPeersGpuOp : public OpKernel {
 public:
  explicit GatherForPeersGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_names", &names_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dims", &dims_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dynamic", &dynamic_));
  }

  void Compute(OpKernelContext* ctx) override {
    const int num_tables = num_inputs() - 2;
    const Tensor& message = ctx->input(num_tables);
    const Tensor& splits = ctx->input(num_tables + 1);  // host memory
    const int64_t num_ranks = splits.NumElements();
    ParsedIds parsed;
    OP_REQUIRES_OK(ctx, ParseDeviceIdMessage(ctx, message, splits, num_tables, &parsed));
    OP_REQUIRES_OK(ctx, CheckDims(dims_, num_tables));
    OP_REQUIRES(ctx, static_cast<int>(dynamic_.size()) == num_tables,
                errors::InvalidArgument("dynamic needs one entry per table"));
    std::vector<tensorflow::core::RefCountPtr<Var>> vars(num_tables);
    for (int t = 0; t < num_tables; ++t) {
      // Hash tables (dynamic_peers_gpu.h) are answered after the static ones.
      if (!dynamic_[t]) OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, t), &vars[t]));
    }
    std::vector<int64_t> offsets;
    VectorOffsets(parsed.count, dims_, num_ranks, &offsets);
    Tensor *vectors, *vector_splits;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({offsets.back()}), &vectors));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({num_ranks}), &vector_splits));
    for (int64_t r = 0; r < num_ranks; ++r) {  // host memory
      vector_splits->flat<int64_t>()(r) = offsets[(r + 1) * num_tables] - offsets[r * num_tables];
    }

    // Rows are read in place under shared locks, taken in address order and held until every
    // gather is queued, so that the checked shapes are the ones read.
    std::vector<Var*> order;
    for (auto& v : vars) {
      if (v) order.push_back(v.get());
    }
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end()), order.end());
    std::vector<std::unique_ptr<tensorflow::tf_shared_lock>> locks;
    for (Var* v : order) locks.push_back(std::make_unique<tensorflow::tf_shared_lock>(*v->mu()));
    std::vector<absl::Status> table_status(num_tables);
    std::vector<int64_t> begin, count, limit;  // segments (t, r) of the tables that passed
    for (int t = 0; t < num_tables; ++t) {
      if (dynamic_[t]) continue;
      table_status[t] = CheckTable<float>(vars[t].get(), TableLabel(names_, t));
      if (table_status[t].ok() && vars[t]->tensor()->dim_size(1) != dims_[t]) {
        table_status[t] = errors::InvalidArgument(TableLabel(names_, t), ": rows have ",
                                                  vars[t]->tensor()->dim_size(1),
                                                  " columns, expected ", dims_[t]);
      }
      if (!table_status[t].ok()) continue;
      for (int64_t r = 0; r < num_ranks; ++r) {
        begin.push_back(parsed.begin[r * num_tables + t]);
        count.push_back(parsed.count[r * num_tables + t]);
        limit.push_back(vars[t]->tensor()->dim_size(0));
      }
    }
    const int64_t* ids = message.flat<int64_t>().data();
    Tensor bad_t;
    uint64_t* bad = nullptr;
    OP_REQUIRES_OK(ctx, DeviceTemp<uint64_t>(ctx, begin.size(), &bad_t, &bad));
    OP_REQUIRES_OK(ctx, LaunchSegmentChecks(ctx, ids, begin, count, limit, bad));
    std::vector<uint64_t> host;
    OP_REQUIRES_OK(ctx, CopyToHostAndWait(ctx, bad, begin.size(), &host));
    // Errors in the CPU kernel's order: table by table, then rank by rank.
    for (int t = 0, s = 0; t < num_tables; ++t) {
      OP_REQUIRES_OK(ctx, table_status[t]);
      for (int64_t r = 0; r < num_ranks && !dynamic_[t]; ++r, ++s) {
        if (host[s] == ~uint64_t{0}) continue;
        int64_t row = 0;
        OP_REQUIRES_OK(ctx, ValueAt(ctx, ids + begin[s] + host[s], &row));
        ctx->CtxFailure(errors::InvalidArgument(TableLabel(names_, t), ": rank ", r,
                                                " asked for local row ", row, " of ", limit[s]));
        return;
      }
    }
    float* out = vectors->flat<float>().data();
    for (int t = 0; t < num_tables; ++t) {
      if (dynamic_[t]) continue;
      const float* table = vars[t]->tensor()->flat<float>().data();
      for (int64_t r = 0; r < num_ranks && dims_[t] > 0; ++r) {
        const int64_t seg = r * num_tables + t;
        OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_gather_rows(
                                           table, dims_[t], ids + parsed.begin[seg],
                                           parsed.count[seg], out + offsets[seg], OpStream(ctx)),
                                       "gather_rows"));
      }
    }
    locks.clear();  // the static reads are queued
    for (int t = 0; t < num_tables; ++t) {
      if (!dynamic_[t]) continue;
      OP_REQUIRES_OK(ctx, AnswerPeersFromDeviceTable(ctx, t, TableLabel(names_, t), dims_[t], ids,
                                                     parsed, offsets, num_ranks, num_tables, out));
    }
  }

 private:
  std::vector<std::string> names_;
  std::vector<int64_t> dims_;
  std::vector<bool> dynamic_;
};

class ReduceForOwnerGpuOp : public OpKernel {
 public:
  explicit ReduceForOwnerGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dims", &dims_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& grads = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckDims(dims_, num_outputs() / 2));
    OP_REQUIRES(ctx, !dims_.empty(), errors::InvalidArgument("dims must name a table"));
    const int64_t num_tables = dims_.size();
    const int64_t num_ranks = ctx->input(2).NumElements();  // host memory
    ParsedIds parsed;
    OP_REQUIRES_OK(ctx,
                   ParseDeviceIdMessage(ctx, ctx->input(1), ctx->input(2), num_tables, &parsed));
    std::vector<int64_t> offsets;
    VectorOffsets(parsed.count, dims_, num_ranks, &offsets);
    OP_REQUIRES(ctx, grads.NumElements() == offsets.back(),
                errors::InvalidArgument("gradient message has ", grads.NumElements(),
                                        " elements, expected ", offsets.back()));
    const int64_t* message = ctx->input(1).flat<int64_t>().data();
    cudaStream_t stream = OpStream(ctx);

    // Per table: every rank's requests gathered into one list, deduplicated (first-occurrence
    // order, as the CPU); the distinct counts come back in one copy.
    Tensor counts_t;
    uint64_t* num_distinct = nullptr;
    OP_REQUIRES_OK(ctx, DeviceTemp<uint64_t>(ctx, num_tables, &counts_t, &num_distinct));
    std::vector<Tensor> distinct(num_tables), inverse(num_tables);
    for (int64_t t = 0; t < num_tables; ++t) {
      int64_t n = 0;
      for (int64_t r = 0; r < num_ranks; ++r) n += parsed.count[r * num_tables + t];
      OP_REQUIRES(ctx, n < (int64_t{1} << 31),
                  errors::InvalidArgument("table ", t, ": more than 2^31 gradient rows"));
      Tensor requested_t, workspace_t;
      int64_t *requested = nullptr, *unique = nullptr;
      int32_t* inv = nullptr;
      uint8_t* workspace = nullptr;
      OP_REQUIRES_OK(ctx, DeviceTemp<int64_t>(ctx, n, &requested_t, &requested));
      OP_REQUIRES_OK(ctx, DeviceTemp<int64_t>(ctx, n, &distinct[t], &unique));
      OP_REQUIRES_OK(ctx, DeviceTemp<int32_t>(ctx, n, &inverse[t], &inv));
      for (int64_t r = 0, at = 0; r < num_ranks; ++r) {
        const int64_t seg = r * num_tables + t;
        if (parsed.count[seg] == 0) continue;
        OP_REQUIRES_OK(ctx, CudaStatus(cudaMemcpyAsync(requested + at, message + parsed.begin[seg],
                                                       parsed.count[seg] * sizeof(int64_t),
                                                       cudaMemcpyDeviceToDevice, stream),
                                       "request copy"));
        at += parsed.count[seg];
      }
      size_t bytes = 0;
      OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_unique_workspace_size(n, &bytes), "unique"));
      OP_REQUIRES_OK(ctx, DeviceTemp<uint8_t>(ctx, bytes, &workspace_t, &workspace));
      OP_REQUIRES_OK(
          ctx, CudaStatus(sok_lite_cuda_unique_ids(requested, n, unique, inv, nullptr,
                                                   reinterpret_cast<int64_t*>(num_distinct + t),
                                                   workspace, bytes, stream),
                          "unique_ids"));
    }
    std::vector<uint64_t> host;
    OP_REQUIRES_OK(ctx, CopyToHostAndWait(ctx, num_distinct, num_tables, &host));

    const float* g = grads.flat<float>().data();
    for (int64_t t = 0; t < num_tables; ++t) {
      const int64_t v = static_cast<int64_t>(host[t]), dim = dims_[t];
      Tensor *rows, *values;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(t, TensorShape({v}), &rows));
      OP_REQUIRES_OK(ctx, ctx->allocate_output(num_tables + t, TensorShape({v, dim}), &values));
      if (v == 0) continue;
      OP_REQUIRES_OK(
          ctx, CudaStatus(
                   cudaMemcpyAsync(rows->flat<int64_t>().data(), distinct[t].flat<int64_t>().data(),
                                   v * sizeof(int64_t), cudaMemcpyDeviceToDevice, stream),
                   "distinct rows copy"));
      if (dim == 0) continue;
      float* out = values->flat<float>().data();
      OP_REQUIRES_OK(
          ctx, CudaStatus(cudaMemsetAsync(out, 0, v * dim * sizeof(float), stream), "zero values"));
      const int32_t* inv = inverse[t].flat<int32_t>().data();
      for (int64_t r = 0, at = 0; r < num_ranks; ++r) {
        const int64_t seg = r * num_tables + t;
        OP_REQUIRES_OK(ctx,
                       CudaStatus(sok_lite_cuda_scatter_add_rows(g + offsets[seg], dim, inv + at,
                                                                 parsed.count[seg], out, stream),
                                  "scatter_add_rows"));
        at += parsed.count[seg];
      }
    }
  }

 private:
  std::vector<int64_t> dims_;
};

REGISTER_KERNEL_BUILDER(Name("SokLiteGatherForPeers")
                            .Device(DEVICE_GPU)
                            .HostMemory("splits")
                            .HostMemory("vector_splits")
                            .TypeConstraint<float>("dtype"),
                        GatherForPeersGpuOp);
REGISTER_KERNEL_BUILDER(Name("SokLiteReduceForOwner")
                            .Device(DEVICE_GPU)
                            .HostMemory("splits")
                            .TypeConstraint<float>("dtype"),
                        ReduceForOwnerGpuOp);

}  // namespace sok_lite
