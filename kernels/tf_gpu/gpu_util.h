// Shared by the GPU OpKernels: the op's CUDA stream, CUDA errors as TF statuses, device
// scratch tensors, and the one small device-to-host copy (checks and sizes) each op waits for.
#ifndef SOK_LITE_KERNELS_TF_GPU_GPU_UTIL_H_
#define SOK_LITE_KERNELS_TF_GPU_GPU_UTIL_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace sok_lite {

inline cudaStream_t OpStream(tensorflow::OpKernelContext* ctx) {
  return ctx->eigen_device<Eigen::GpuDevice>().stream();
}

// A cudaError_t as a status: launchers return cudaErrorInvalidValue for bad arguments, which
// the kernels have already ruled out, so any error here is internal.
inline absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return tensorflow::errors::Internal(what, " failed: ", cudaGetErrorString(err));
}

// A device scratch tensor of `count` values of T (at least one, so data() is never null).
template <typename T>
absl::Status DeviceTemp(tensorflow::OpKernelContext* ctx, int64_t count, tensorflow::Tensor* t,
                        T** data) {
  TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DataTypeToEnum<T>::v(),
                                        tensorflow::TensorShape({std::max<int64_t>(count, 1)}), t));
  *data = reinterpret_cast<T*>(t->data());
  return absl::OkStatus();
}

// Copies `count` values from device to host and waits for the stream: the single point where
// an op learns its checks' outcome and its output sizes.
template <typename T>
absl::Status CopyToHostAndWait(tensorflow::OpKernelContext* ctx, const T* device, int64_t count,
                               std::vector<T>* host) {
  host->resize(count);
  if (count == 0) return absl::OkStatus();
  cudaStream_t stream = OpStream(ctx);
  TF_RETURN_IF_ERROR(CudaStatus(
      cudaMemcpyAsync(host->data(), device, count * sizeof(T), cudaMemcpyDeviceToHost, stream),
      "device-to-host copy"));
  return CudaStatus(cudaStreamSynchronize(stream), "stream synchronize");
}

// Copies host values to a device scratch tensor (small: row splits of a flat index list).
template <typename T>
absl::Status CopyToDevice(tensorflow::OpKernelContext* ctx, const std::vector<T>& host,
                          tensorflow::Tensor* t, T** device) {
  TF_RETURN_IF_ERROR(DeviceTemp<T>(ctx, host.size(), t, device));
  if (host.empty()) return absl::OkStatus();
  // From pageable memory the copy is staged before cudaMemcpyAsync returns, so `host` may go.
  return CudaStatus(cudaMemcpyAsync(*device, host.data(), host.size() * sizeof(T),
                                    cudaMemcpyHostToDevice, OpStream(ctx)),
                    "host-to-device copy");
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_GPU_GPU_UTIL_H_
