// Device-side range checks of segmented values (sok_lite_cuda_check_segments), and the one-value
// copy an error message needs to name the offending value.
#ifndef SOK_LITE_KERNELS_TF_GPU_CHECK_SEGMENTS_GPU_H_
#define SOK_LITE_KERNELS_TF_GPU_CHECK_SEGMENTS_GPU_H_

#include <cstdint>
#include <vector>

#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

// bad[s] (device) = the first j of segment s with values[begin[s] + j] outside [0, limit[s])
// (limit < 0: only negatives fail), UINT64_MAX when none; segment s has count[s] values.
template <typename V>
absl::Status LaunchSegmentChecks(tensorflow::OpKernelContext* ctx, const V* values,
                                 const std::vector<int64_t>& begin,
                                 const std::vector<int64_t>& count,
                                 const std::vector<int64_t>& limit, uint64_t* bad) {
  const int64_t segments = begin.size();
  if (segments == 0) return absl::OkStatus();
  // One upload: [begin | ends | limit].
  std::vector<int64_t> params(begin);
  int64_t total = 0;
  for (int64_t c : count) params.push_back(total += c);
  params.insert(params.end(), limit.begin(), limit.end());
  tensorflow::Tensor params_t;
  int64_t* device = nullptr;
  TF_RETURN_IF_ERROR(CopyToDevice(ctx, params, &params_t, &device));
  cudaError_t err;
  if constexpr (sizeof(V) == sizeof(int64_t)) {
    err = sok_lite_cuda_check_segments(values, device, device + segments, device + 2 * segments,
                                       segments, total, bad, OpStream(ctx));
  } else {
    err = sok_lite_cuda_check_segments_i32(values, device, device + segments, device + 2 * segments,
                                           segments, total, bad, OpStream(ctx));
  }
  return CudaStatus(err, "check_segments");
}

// The value at device address `at` (error paths only: it waits for the stream).
template <typename V>
absl::Status ValueAt(tensorflow::OpKernelContext* ctx, const V* at, V* value) {
  std::vector<V> host;
  TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, at, 1, &host));
  *value = host[0];
  return absl::OkStatus();
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_GPU_CHECK_SEGMENTS_GPU_H_
