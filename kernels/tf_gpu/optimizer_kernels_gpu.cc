// GPU functor and kernel registration of SokLiteSparseApply (kernel class in
// kernels/tf/optimizer_kernels.h), float32 gradients and slots (tables float32 or 16-bit): the
// indices are deduplicated on the device, checked under the variables' locks with one wait, and the
// gradients of repeated rows summed.
#include <cstdint>
#include <vector>

#include "kernels/core/optimizer.h"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/optimizer_kernels.h"
#include "kernels/tf_gpu/check_segments_gpu.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "kernels/tf_gpu/lookup_validate_gpu.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

template <>
class SparseApplyFunctor<GPUDevice, float> {
 public:
  static constexpr int64_t kMaxIndices = int64_t{1} << 31;

  // Distinct rows in first-occurrence order (as the CPU); their count comes back with the
  // range check: results = [kRaggedChecks check values, num_unique].
  absl::Status Unique(OpKernelContext* ctx, const Tensor& indices, const Tensor& grads, int64_t) {
    n_ = indices.NumElements();
    idx_ = indices.flat<int64_t>().data();
    grads_ = grads.flat<float>().data();
    uint8_t* workspace = nullptr;
    size_t bytes = 0;
    TF_RETURN_IF_ERROR(DeviceTemp<uint64_t>(ctx, kRaggedChecks + 1, &results_t_, &results_));
    TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, n_, &rows_t_, &rows_));
    TF_RETURN_IF_ERROR(DeviceTemp<int32_t>(ctx, n_, &inverse_t_, &inverse_));
    TF_RETURN_IF_ERROR(CudaStatus(sok_lite_cuda_unique_workspace_size(n_, &bytes), "unique"));
    TF_RETURN_IF_ERROR(DeviceTemp<uint8_t>(ctx, bytes, &workspace_t_, &workspace));
    return CudaStatus(sok_lite_cuda_unique_ids(idx_, n_, rows_, inverse_, nullptr,
                                               reinterpret_cast<int64_t*>(results_ + kRaggedChecks),
                                               workspace, bytes, OpStream(ctx)),
                      "unique_ids");
  }

  // The indices as one sample, so check_ragged checks their range; one wait for it and u.
  absl::Status FirstBadRow(OpKernelContext* ctx, int64_t num_rows, bool* bad, int64_t* row) {
    Tensor splits_t;
    int64_t* splits = nullptr;
    TF_RETURN_IF_ERROR(CopyToDevice<int64_t>(ctx, {0, n_}, &splits_t, &splits));
    TF_RETURN_IF_ERROR(CudaStatus(sok_lite_cuda_check_ragged(splits, 1, n_, idx_, num_rows, 0,
                                                             nullptr, 0, results_, OpStream(ctx)),
                                  "check_ragged"));
    std::vector<uint64_t> host;
    TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, results_, kRaggedChecks + 1, &host));
    u_ = static_cast<int64_t>(host[kRaggedChecks]);
    if (host[2] == ~uint64_t{0}) return absl::OkStatus();
    // The first bad position holds the first bad distinct row, the one the CPU reports.
    *bad = true;
    return ValueAt(ctx, idx_ + host[2], row);
  }

  static absl::Status CopyBuffer(OpKernelContext* ctx, const Tensor& from, Tensor* to) {
    if (from.TotalBytes() == 0) return absl::OkStatus();
    return CudaStatus(cudaMemcpyAsync(to->data(), from.data(), from.TotalBytes(),
                                      cudaMemcpyDeviceToDevice, OpStream(ctx)),
                      "variable copy");
  }

  // Sums the gradients of repeated rows, so every row is updated exactly once.
  absl::Status Apply(OpKernelContext* ctx, OptimizerKind kind, const OptimizerHyper& hyper,
                     int64_t dim, float* w, const std::vector<float*>& slots) {
    if (u_ == 0 || dim == 0) return absl::OkStatus();
    cudaStream_t stream = OpStream(ctx);
    Tensor summed_t;
    const float* g = nullptr;
    TF_RETURN_IF_ERROR(SummedGradients(ctx, dim, &summed_t, &g));
    return CudaStatus(
        sok_lite_cuda_apply_rows(static_cast<int>(kind), hyper.lr, hyper.weight_decay,
                                 hyper.p.data(), static_cast<int>(hyper.p.size()), dim, rows_, g,
                                 u_, w, slots.data(), static_cast<int>(slots.size()), stream),
        "apply_rows");
  }

  // A 16-bit table (kernels/tf/table_dtype.h): float32 math and slots, rows rounded back.
  absl::Status ApplyHalf(OpKernelContext* ctx, OptimizerKind kind, const OptimizerHyper& hyper,
                         int64_t dim, uint16_t* w, const std::vector<float*>& slots,
                         const HalfRounding& rounding) {
    if (u_ == 0 || dim == 0) return absl::OkStatus();
    Tensor summed_t;
    const float* g = nullptr;
    TF_RETURN_IF_ERROR(SummedGradients(ctx, dim, &summed_t, &g));
    return CudaStatus(
        sok_lite_cuda_apply_half_rows(
            static_cast<int>(kind), hyper.lr, hyper.weight_decay, hyper.p.data(),
            static_cast<int>(hyper.p.size()), dim, rows_, g, u_, w, slots.data(),
            static_cast<int>(slots.size()), static_cast<int>(rounding.format), rounding.seed,
            rounding.step, rounding.row_stride, rounding.row_offset, OpStream(ctx)),
        "apply_half_rows");
  }

  // The same with bfloat16 slots, rounded back beside the row.
  absl::Status ApplyHalfSlots(OpKernelContext* ctx, OptimizerKind kind, const OptimizerHyper& hyper,
                              int64_t dim, uint16_t* w, const std::vector<uint16_t*>& bf16_slots,
                              const HalfRounding& rounding) {
    if (u_ == 0 || dim == 0) return absl::OkStatus();
    Tensor summed_t;
    const float* g = nullptr;
    TF_RETURN_IF_ERROR(SummedGradients(ctx, dim, &summed_t, &g));
    return CudaStatus(
        sok_lite_cuda_apply_half_rows_bf16_slots(
            static_cast<int>(kind), hyper.lr, hyper.weight_decay, hyper.p.data(),
            static_cast<int>(hyper.p.size()), dim, rows_, g, u_, w, bf16_slots.data(),
            static_cast<int>(bf16_slots.size()), static_cast<int>(rounding.format), rounding.seed,
            rounding.step, rounding.row_stride, rounding.row_offset, OpStream(ctx)),
        "apply_half_rows_bf16_slots");
  }

  absl::Status Track(OpKernelContext* ctx, int64_t* tracker, int64_t step) {
    if (u_ == 0) return absl::OkStatus();
    return CudaStatus(sok_lite_cuda_mark_rows(rows_, u_, step, tracker, OpStream(ctx)),
                      "mark_rows");
  }

 private:
  // *g = the gradient of each distinct row: grads itself, or (repeated rows) their sums in
  // *summed_t.
  absl::Status SummedGradients(OpKernelContext* ctx, int64_t dim, Tensor* summed_t,
                               const float** g) {
    *g = grads_;
    if (u_ == n_) return absl::OkStatus();
    cudaStream_t stream = OpStream(ctx);
    float* summed = nullptr;
    TF_RETURN_IF_ERROR(DeviceTemp<float>(ctx, u_ * dim, summed_t, &summed));
    TF_RETURN_IF_ERROR(
        CudaStatus(cudaMemsetAsync(summed, 0, u_ * dim * sizeof(float), stream), "zero gradients"));
    TF_RETURN_IF_ERROR(
        CudaStatus(sok_lite_cuda_scatter_add_rows(grads_, dim, inverse_, n_, summed, stream),
                   "scatter_add_rows"));
    *g = summed;
    return absl::OkStatus();
  }

  int64_t n_ = 0;
  int64_t u_ = 0;
  const int64_t* idx_ = nullptr;
  const float* grads_ = nullptr;
  Tensor results_t_, rows_t_, inverse_t_, workspace_t_;
  uint64_t* results_ = nullptr;
  int64_t* rows_ = nullptr;
  int32_t* inverse_ = nullptr;
};

REGISTER_KERNEL_BUILDER(Name("SokLiteSparseApply")
                            .Device(::tensorflow::DEVICE_GPU)
                            .HostMemory("hyper")
                            .HostMemory("step")
                            .TypeConstraint<float>("dtype"),
                        SparseApplyOp<GPUDevice, float>);

}  // namespace sok_lite
