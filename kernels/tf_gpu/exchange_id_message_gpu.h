// Parses a received id message that lives in device memory: only the per-rank headers (the T
// counts at the start of each rank's segment) are copied to the host, in one batch of copies
// and one wait. Same checks and messages as core ParseIdMessage.
#ifndef SOK_LITE_KERNELS_TF_GPU_EXCHANGE_ID_MESSAGE_GPU_H_
#define SOK_LITE_KERNELS_TF_GPU_EXCHANGE_ID_MESSAGE_GPU_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/exchange.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

// message: device int64 [size]; splits: host int64 [num_ranks].
inline absl::Status ParseDeviceIdMessage(tensorflow::OpKernelContext* ctx,
                                         const tensorflow::Tensor& message,
                                         const tensorflow::Tensor& splits, int64_t num_tables,
                                         ParsedIds* parsed) {
  const int64_t size = message.NumElements(), num_ranks = splits.NumElements();
  const int64_t* split = splits.flat<int64_t>().data();
  // Segment bounds need no header: find the first malformed segment, copy the headers before it.
  std::vector<int64_t> start(num_ranks);
  int64_t at = 0, well_formed = num_ranks;
  for (int64_t r = 0; r < num_ranks; ++r) {
    if (split[r] < num_tables || split[r] > size - at) {
      well_formed = r;
      break;
    }
    start[r] = at;
    at += split[r];
  }
  std::vector<int64_t> headers(well_formed * num_tables);
  cudaStream_t stream = OpStream(ctx);
  for (int64_t r = 0; r < well_formed; ++r) {
    TF_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(headers.data() + r * num_tables, message.flat<int64_t>().data() + start[r],
                        num_tables * sizeof(int64_t), cudaMemcpyDeviceToHost, stream),
        "header copy"));
  }
  if (well_formed > 0) {
    TF_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "stream synchronize"));
  }
  parsed->begin.assign(num_ranks * num_tables, 0);
  parsed->count.assign(num_ranks * num_tables, 0);
  for (int64_t r = 0; r < num_ranks; ++r) {
    if (r == well_formed) {
      return tensorflow::errors::InvalidArgument("id message segment of rank ", r, " is malformed");
    }
    const int64_t end = start[r] + split[r];
    int64_t ids_at = start[r] + num_tables;
    for (int64_t t = 0; t < num_tables; ++t) {
      const int64_t c = headers[r * num_tables + t];
      if (c < 0 || c > end - ids_at) {
        return tensorflow::errors::InvalidArgument("id message from rank ", r,
                                                   " has a bad count for table ", t);
      }
      parsed->begin[r * num_tables + t] = ids_at;
      parsed->count[r * num_tables + t] = c;
      ids_at += c;
    }
    if (ids_at != end) {
      return tensorflow::errors::InvalidArgument("id message segment of rank ", r,
                                                 " has trailing entries");
    }
  }
  if (at != size) {
    return tensorflow::errors::InvalidArgument("id message size does not match its splits");
  }
  return absl::OkStatus();
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_GPU_EXCHANGE_ID_MESSAGE_GPU_H_
