// GPU kernels of the requester side of the exchange (ops registered in
// kernels/tf/exchange_ops.cc): SokLiteUnpackRows puts the answered vector message back into
// per-table rows in unique order, SokLitePackRows (its gradient) does the reverse. Float32 only;
// counts are in host memory, send_pos stays on the device and is range-checked there.
#include <string>
#include <vector>

#include "kernels/core/exchange.h"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "kernels/tf_gpu/segment_checks.h"
#include "tensorflow/core/framework/op_kernel.h"

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

// The CPU kernels' CheckLayout: counts (host) against the per-table sizes, send_pos (device)
// against each table's unique count, one wait; also returns the vector-message offsets and
// where each (rank, table) segment starts in send_pos.
absl::Status CheckLayoutOnDevice(OpKernelContext* ctx, const Tensor& counts, const Tensor& send_pos,
                                 const std::vector<int64_t>& dims, std::vector<int64_t>* num_unique,
                                 std::vector<int64_t>* offsets, std::vector<int64_t>* pos_begin) {
  const int64_t num_tables = dims.size();
  if (num_tables == 0) return errors::InvalidArgument("dims must name at least one table");
  if (counts.NumElements() % num_tables != 0) {
    return errors::InvalidArgument("counts size is not a multiple of the table count");
  }
  const int64_t num_ranks = counts.NumElements() / num_tables;
  const auto c = counts.flat<int64_t>();
  std::vector<int64_t> count(c.data(), c.data() + c.size());
  num_unique->assign(num_tables, 0);
  int64_t total = 0;
  for (int64_t s = 0; s < num_ranks * num_tables; ++s) {
    if (count[s] < 0 || count[s] > (int64_t{1} << 40)) {
      return errors::InvalidArgument("count ", count[s], " is out of range");
    }
    (*num_unique)[s % num_tables] += count[s];
    total += count[s];
  }
  if (send_pos.NumElements() != total) {
    return errors::InvalidArgument("send_pos has ", send_pos.NumElements(), " entries for ", total,
                                   " ids");
  }
  VectorOffsets(count, dims, num_ranks, offsets);
  std::vector<int64_t> limit;
  pos_begin->clear();
  for (int64_t s = 0, p = 0; s < num_ranks * num_tables; p += count[s], ++s) {
    pos_begin->push_back(p);
    limit.push_back((*num_unique)[s % num_tables]);
  }
  const int32_t* pos = send_pos.flat<int32_t>().data();
  Tensor bad_t;
  uint64_t* bad = nullptr;
  TF_RETURN_IF_ERROR(DeviceTemp<uint64_t>(ctx, count.size(), &bad_t, &bad));
  TF_RETURN_IF_ERROR(LaunchSegmentChecks(ctx, pos, *pos_begin, count, limit, bad));
  std::vector<uint64_t> host;
  TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, bad, count.size(), &host));
  for (size_t s = 0; s < host.size(); ++s) {
    if (host[s] == ~uint64_t{0}) continue;
    int32_t value = 0;
    TF_RETURN_IF_ERROR(ValueAt(ctx, pos + (*pos_begin)[s] + host[s], &value));
    return errors::InvalidArgument("send_pos ", value, " out of range");
  }
  return absl::OkStatus();
}

}  // namespace

class UnpackRowsGpuOp : public OpKernel {
 public:
  explicit UnpackRowsGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dims", &dims_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& vectors = ctx->input(0);
    const Tensor& counts = ctx->input(1);  // host memory
    const Tensor& send_pos = ctx->input(2);
    OP_REQUIRES_OK(ctx, CheckDims(dims_, num_outputs()));
    std::vector<int64_t> num_unique, offsets, pos_begin;
    OP_REQUIRES_OK(
        ctx, CheckLayoutOnDevice(ctx, counts, send_pos, dims_, &num_unique, &offsets, &pos_begin));
    OP_REQUIRES(ctx, vectors.NumElements() == offsets.back(),
                errors::InvalidArgument("vector message has ", vectors.NumElements(),
                                        " elements, expected ", offsets.back()));
    cudaStream_t stream = OpStream(ctx);
    const int64_t num_tables = dims_.size();
    std::vector<float*> rows(num_tables);
    for (int64_t t = 0; t < num_tables; ++t) {
      TensorShape shape;
      OP_REQUIRES_OK(ctx, SafeShape({num_unique[t], dims_[t]}, &shape));
      Tensor* out;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(t, shape, &out));
      rows[t] = out->flat<float>().data();
      // Zeros for rows no segment names, as on the CPU.
      if (out->NumElements() > 0) {
        OP_REQUIRES_OK(
            ctx, CudaStatus(cudaMemsetAsync(rows[t], 0, out->TotalBytes(), stream), "zero rows"));
      }
    }
    const float* src = vectors.flat<float>().data();
    const int32_t* pos = send_pos.flat<int32_t>().data();
    const int64_t* count = counts.flat<int64_t>().data();
    for (int64_t s = 0; s < counts.NumElements(); ++s) {
      const int64_t t = s % num_tables;
      if (dims_[t] == 0) continue;
      OP_REQUIRES_OK(
          ctx, CudaStatus(sok_lite_cuda_scatter_rows(src + offsets[s], dims_[t], pos + pos_begin[s],
                                                     count[s], rows[t], stream),
                          "scatter_rows"));
    }
  }

 private:
  std::vector<int64_t> dims_;
};

class PackRowsGpuOp : public OpKernel {
 public:
  explicit PackRowsGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    OpInputList rows;
    OP_REQUIRES_OK(ctx, ctx->input_list("rows", &rows));
    const Tensor& counts = ctx->input(rows.size());  // host memory
    const Tensor& send_pos = ctx->input(rows.size() + 1);
    std::vector<int64_t> dims;
    OP_REQUIRES_OK(ctx, RowWidths(rows, &dims));
    std::vector<int64_t> num_unique, offsets, pos_begin;
    OP_REQUIRES_OK(
        ctx, CheckLayoutOnDevice(ctx, counts, send_pos, dims, &num_unique, &offsets, &pos_begin));
    OP_REQUIRES_OK(ctx, CheckRowCounts(rows, num_unique));
    Tensor* vectors;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({offsets.back()}), &vectors));
    float* dst = vectors->flat<float>().data();
    const int32_t* pos = send_pos.flat<int32_t>().data();
    const int64_t* count = counts.flat<int64_t>().data();
    const int64_t num_tables = dims.size();
    for (int64_t s = 0; s < counts.NumElements(); ++s) {
      const int64_t t = s % num_tables;
      if (dims[t] == 0) continue;
      OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_gather_rows_i32(
                                         rows[t].flat<float>().data(), dims[t], pos + pos_begin[s],
                                         count[s], dst + offsets[s], OpStream(ctx)),
                                     "gather_rows_i32"));
    }
  }
};

REGISTER_KERNEL_BUILDER(Name("SokLiteUnpackRows")
                            .Device(DEVICE_GPU)
                            .HostMemory("counts")
                            .TypeConstraint<float>("dtype"),
                        UnpackRowsGpuOp);
REGISTER_KERNEL_BUILDER(
    Name("SokLitePackRows").Device(DEVICE_GPU).HostMemory("counts").TypeConstraint<float>("dtype"),
    PackRowsGpuOp);

}  // namespace sok_lite
