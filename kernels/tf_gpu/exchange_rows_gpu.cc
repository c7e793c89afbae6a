// GPU functors of the requester side of the exchange (kernels in
// kernels/tf/exchange_kernels.h): SokLiteUnpackRows puts the answered vector message back into
// per-table rows in unique order, SokLitePackRows (its gradient) does the reverse. Float32 only;
// counts are in host memory, send_pos stays on the device and is range-checked there.
#include <vector>

#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/exchange_kernels.h"
#include "kernels/tf_gpu/check_segments_gpu.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

using ::tensorflow::DEVICE_GPU;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

// Every segment checked on the device, one wait.
template <>
absl::Status SendPosCheck<GPUDevice>::FindOutOfRange(OpKernelContext* ctx, const int32_t* pos,
                                                     const RowLayout& layout, bool* found,
                                                     int32_t* value) {
  *found = false;
  const int64_t num_tables = layout.num_unique.size(), segments = layout.count.size();
  std::vector<int64_t> limit;
  for (int64_t s = 0; s < segments; ++s) limit.push_back(layout.num_unique[s % num_tables]);
  Tensor bad_t;
  uint64_t* bad = nullptr;
  TF_RETURN_IF_ERROR(DeviceTemp<uint64_t>(ctx, segments, &bad_t, &bad));
  TF_RETURN_IF_ERROR(LaunchSegmentChecks(ctx, pos, layout.pos_begin, layout.count, limit, bad));
  std::vector<uint64_t> host;
  TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, bad, segments, &host));
  for (int64_t s = 0; s < segments; ++s) {
    if (host[s] == ~uint64_t{0}) continue;
    *found = true;
    return ValueAt(ctx, pos + layout.pos_begin[s] + host[s], value);
  }
  return absl::OkStatus();
}

template <>
template <>
absl::Status UnpackRowsFunctor<GPUDevice>::Compute<float>(
    OpKernelContext* ctx, const float* src, const int32_t* pos, const RowLayout& layout,
    const std::vector<int64_t>& dims, const std::vector<float*>& rows,
    const std::vector<int64_t>& rows_elements) {
  cudaStream_t stream = OpStream(ctx);
  const int64_t num_tables = dims.size();
  for (int64_t t = 0; t < num_tables; ++t) {
    // Zeros for rows no segment names, as on the CPU.
    if (rows_elements[t] == 0) continue;
    TF_RETURN_IF_ERROR(CudaStatus(
        cudaMemsetAsync(rows[t], 0, rows_elements[t] * sizeof(float), stream), "zero rows"));
  }
  for (size_t s = 0; s < layout.count.size(); ++s) {
    const int64_t t = s % num_tables;
    if (dims[t] == 0) continue;
    TF_RETURN_IF_ERROR(CudaStatus(
        sok_lite_cuda_scatter_rows(src + layout.offsets[s], dims[t], pos + layout.pos_begin[s],
                                   layout.count[s], rows[t], stream),
        "scatter_rows"));
  }
  return absl::OkStatus();
}

template <>
template <>
absl::Status PackRowsFunctor<GPUDevice>::Compute<float>(OpKernelContext* ctx,
                                                        const std::vector<const float*>& rows,
                                                        const int32_t* pos, const RowLayout& layout,
                                                        const std::vector<int64_t>& dims,
                                                        float* dst) {
  const int64_t num_tables = dims.size();
  for (size_t s = 0; s < layout.count.size(); ++s) {
    const int64_t t = s % num_tables;
    if (dims[t] == 0) continue;
    TF_RETURN_IF_ERROR(CudaStatus(
        sok_lite_cuda_gather_rows_i32(rows[t], dims[t], pos + layout.pos_begin[s], layout.count[s],
                                      dst + layout.offsets[s], OpStream(ctx)),
        "gather_rows_i32"));
  }
  return absl::OkStatus();
}

REGISTER_KERNEL_BUILDER(Name("SokLiteUnpackRows")
                            .Device(DEVICE_GPU)
                            .HostMemory("counts")
                            .TypeConstraint<float>("dtype"),
                        UnpackRowsOp<GPUDevice, float>);
REGISTER_KERNEL_BUILDER(
    Name("SokLitePackRows").Device(DEVICE_GPU).HostMemory("counts").TypeConstraint<float>("dtype"),
    PackRowsOp<GPUDevice, float>);

}  // namespace sok_lite
