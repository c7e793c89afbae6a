// GPU functors of the lookup family's kernels (kernels/tf/lookup_kernels.h): float32 rows, read
// from float32 or 16-bit tables. Each
// op launches the kernels/cuda launchers on the op's stream and waits once, for a small copy of
// its device-side checks (and, for the unique ids, their count); only a failed check copies more,
// to name the offending value as the CPU kernel does.
#include <string>
#include <vector>

#include "kernels/core/lookup_combine.h"
#include "kernels/core/lookup_validate.h"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/lookup_kernels.h"
#include "kernels/tf_gpu/check_segments_gpu.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "kernels/tf_gpu/lookup_validate_gpu.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

using ::tensorflow::DEVICE_GPU;
using ::tensorflow::OpInputList;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

// Combiners are read by ReadCombiners (kernel_args.h); SokLiteCudaCombiner has Combiner's order.
static_assert(static_cast<int>(Combiner::kSum) == SOK_LITE_CUDA_SUM &&
                  static_cast<int>(Combiner::kMean) == SOK_LITE_CUDA_MEAN &&
                  static_cast<int>(Combiner::kSqrtn) == SOK_LITE_CUDA_SQRTN,
              "the CUDA combiner codes follow kernels/core/lookup_combine.h");

namespace {

// After a failed device check (problem not empty): the first problem in the CPU kernel's words,
// from core/lookup_validate.h's checks on a host copy of the inputs (error paths only), so that
// both devices give the same message. ids or inverse is null when not checked.
absl::Status CpuWords(OpKernelContext* ctx, const int64_t* row_splits, int64_t batch, int64_t n,
                      const int64_t* ids, int64_t num_rows, int64_t hotness, const int32_t* inverse,
                      int64_t num_unique, std::string* problem) {
  if (problem->empty()) return absl::OkStatus();
  std::vector<int64_t> host_splits, host_ids;
  std::vector<int32_t> host_inverse;
  TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, row_splits, batch + 1, &host_splits));
  std::string words = CheckRowSplits(host_splits.data(), batch, n);
  if (words.empty() && ids != nullptr) {
    TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, ids, n, &host_ids));
    words = CheckIds(host_ids.data(), host_splits.data(), batch, num_rows, hotness);
  }
  if (words.empty() && inverse != nullptr) {
    TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, inverse, n, &host_inverse));
    words = CheckInverse(host_inverse.data(), n, num_unique);
  }
  if (!words.empty()) *problem = words;
  return absl::OkStatus();
}

}  // namespace

template <>
class UniqueIdsFunctor<GPUDevice> {
 public:
  absl::Status Run(OpKernelContext* ctx, const UniqueIdsArgs& args, UniqueIdsTables* tables) {
    cudaStream_t stream = OpStream(ctx);
    const int n_tables = tables->ids.size();
    // Per table: checks and unique ids into scratch, then ONE wait for all tables' results
    // (kRaggedChecks check values + the unique count, per table).
    constexpr int kPerTable = kRaggedChecks + 1;
    Tensor results_t;
    uint64_t* results = nullptr;
    TF_RETURN_IF_ERROR(DeviceTemp<uint64_t>(ctx, n_tables * kPerTable, &results_t, &results));
    uniques_.resize(n_tables);
    for (int t = 0; t < n_tables; ++t) {
      const int64_t n = tables->ids[t].NumElements();
      const int64_t* id = tables->ids[t].flat<int64_t>().data();
      uint64_t* bad = results + t * kPerTable;
      TF_RETURN_IF_ERROR(CudaStatus(
          sok_lite_cuda_check_ragged(tables->row_splits[t].flat<int64_t>().data(),
                                     tables->row_splits[t].NumElements() - 1, n, id,
                                     args.num_rows[t], args.hotness[t], nullptr, 0, bad, stream),
          "check_ragged"));
      int64_t* unique = nullptr;
      TF_RETURN_IF_ERROR(DeviceTemp<int64_t>(ctx, n, &uniques_[t], &unique));
      size_t bytes = 0;
      TF_RETURN_IF_ERROR(CudaStatus(sok_lite_cuda_unique_workspace_size(n, &bytes), "unique"));
      Tensor workspace_t;
      uint8_t* workspace = nullptr;
      TF_RETURN_IF_ERROR(DeviceTemp<uint8_t>(ctx, bytes, &workspace_t, &workspace));
      // Unchecked ids are still safe to deduplicate: any int64 value is a valid key.
      TF_RETURN_IF_ERROR(
          CudaStatus(sok_lite_cuda_unique_ids(id, n, unique, tables->inverse[t], nullptr,
                                              reinterpret_cast<int64_t*>(bad + kRaggedChecks),
                                              workspace, bytes, stream),
                     "unique_ids"));
    }
    std::vector<uint64_t> host;
    TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, results, n_tables * kPerTable, &host));
    for (int t = 0; t < n_tables; ++t) {
      tables->problems[t] =
          RaggedProblem(host.data() + t * kPerTable, args.num_rows[t], args.hotness[t], 0);
      TF_RETURN_IF_ERROR(CpuWords(ctx, tables->row_splits[t].flat<int64_t>().data(),
                                  tables->row_splits[t].NumElements() - 1,
                                  tables->ids[t].NumElements(),
                                  tables->ids[t].flat<int64_t>().data(), args.num_rows[t],
                                  args.hotness[t], nullptr, 0, &tables->problems[t]));
      tables->counts[t] = static_cast<int64_t>(host[t * kPerTable + kRaggedChecks]);
    }
    return absl::OkStatus();
  }

  absl::Status CopyUnique(OpKernelContext* ctx, int t, int64_t count, int64_t* out) {
    return CudaStatus(
        cudaMemcpyAsync(out, uniques_[t].flat<int64_t>().data(), count * sizeof(int64_t),
                        cudaMemcpyDeviceToDevice, OpStream(ctx)),
        "unique copy");
  }

 private:
  std::vector<Tensor> uniques_;  // device scratch, n ids each
};

template <>
absl::Status GatherIndexCheck<GPUDevice>::Run(OpKernelContext* ctx, const int64_t* indices,
                                              int64_t u, int64_t num_rows, bool* found,
                                              int64_t* position, int64_t* value) {
  // The indices as one sample, so check_ragged checks their range.
  Tensor splits_t, bad_t;
  int64_t* splits = nullptr;
  uint64_t* bad = nullptr;
  TF_RETURN_IF_ERROR(CopyToDevice<int64_t>(ctx, {0, u}, &splits_t, &splits));
  TF_RETURN_IF_ERROR(DeviceTemp<uint64_t>(ctx, kRaggedChecks, &bad_t, &bad));
  TF_RETURN_IF_ERROR(CudaStatus(sok_lite_cuda_check_ragged(splits, 1, u, indices, num_rows, 0,
                                                           nullptr, 0, bad, OpStream(ctx)),
                                "check_ragged"));
  std::vector<uint64_t> host;
  TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, bad, kRaggedChecks, &host));
  constexpr uint64_t kPassed = ~uint64_t{0};
  *found = host[2] != kPassed;  // the id range check
  if (!*found) return absl::OkStatus();
  *position = static_cast<int64_t>(host[2]);
  return ValueAt(ctx, indices + host[2], value);  // error path only: a second wait
}

template <>
struct GatherRowsFunctor<GPUDevice, float> {
  static absl::Status Compute(OpKernelContext* ctx, const float* table, int64_t dim,
                              const int64_t* indices, int64_t u, float* rows) {
    return CudaStatus(sok_lite_cuda_gather_rows(table, dim, indices, u, rows, OpStream(ctx)),
                      "gather_rows");
  }
};

// 16-bit tables (kernels/tf/table_dtype.h): rows widened to float32 as they are read.
template <typename Stored>
struct GatherRowsFunctor<GPUDevice, float, Stored> {
  static absl::Status Compute(OpKernelContext* ctx, const Stored* table, int64_t dim,
                              const int64_t* indices, int64_t u, float* rows) {
    const int format = static_cast<int>(HalfStorage<Stored>::kFormat);
    return CudaStatus(sok_lite_cuda_gather_half_rows(HalfBits(table), format, dim, indices, u, rows,
                                                     OpStream(ctx)),
                      "gather_half_rows");
  }
};

template <>
absl::Status CombineSegmentChecks<GPUDevice>::Run(OpKernelContext* ctx, const CombineSegments& seg,
                                                  int64_t num_unique, std::string* problem) {
  Tensor bad_t;
  uint64_t* bad = nullptr;
  TF_RETURN_IF_ERROR(DeviceTemp<uint64_t>(ctx, kRaggedChecks, &bad_t, &bad));
  TF_RETURN_IF_ERROR(
      CudaStatus(sok_lite_cuda_check_ragged(seg.row_splits, seg.batch, seg.n, nullptr, -1, 0,
                                            seg.inverse, num_unique, bad, OpStream(ctx)),
                 "check_ragged"));
  std::vector<uint64_t> host;
  TF_RETURN_IF_ERROR(CopyToHostAndWait(ctx, bad, kRaggedChecks, &host));
  *problem = RaggedProblem(host.data(), -1, 0, num_unique);
  return CpuWords(ctx, seg.row_splits, seg.batch, seg.n, nullptr, -1, 0, seg.inverse, num_unique,
                  problem);
}

namespace {

// scale[b] of each sample, in device scratch.
absl::Status SampleScalesGpu(OpKernelContext* ctx, const CombineSegments& seg, Combiner combiner,
                             Tensor* scale_t, float** scale) {
  TF_RETURN_IF_ERROR(DeviceTemp<float>(ctx, seg.batch, scale_t, scale));
  return CudaStatus(
      sok_lite_cuda_sample_scales(seg.row_splits, static_cast<const float*>(seg.weights), seg.batch,
                                  static_cast<int>(combiner), *scale, OpStream(ctx)),
      "sample_scales");
}

}  // namespace

template <>
struct SegmentCombineFunctor<GPUDevice, float> {
  static absl::Status Forward(OpKernelContext* ctx, const float* rows, int64_t dim,
                              const CombineSegments& seg, Combiner combiner, Tensor* out) {
    Tensor scale_t;
    float* scale = nullptr;
    TF_RETURN_IF_ERROR(SampleScalesGpu(ctx, seg, combiner, &scale_t, &scale));
    return CudaStatus(
        sok_lite_cuda_combine_forward(rows, dim, seg.inverse, seg.row_splits,
                                      static_cast<const float*>(seg.weights), scale, seg.batch,
                                      out->flat<float>().data(), OpStream(ctx)),
        "combine_forward");
  }

  static absl::Status Backward(OpKernelContext* ctx,
                               const std::vector<CombineGradTable<float>>& tables) {
    for (const CombineGradTable<float>& t : tables) {
      Tensor scale_t;
      float* scale = nullptr;
      TF_RETURN_IF_ERROR(SampleScalesGpu(ctx, t.seg, t.combiner, &scale_t, &scale));
      TF_RETURN_IF_ERROR(CudaStatus(
          sok_lite_cuda_combine_backward(t.grads, t.dim, t.seg.inverse, t.seg.row_splits,
                                         t.seg.batch, static_cast<const float*>(t.seg.weights),
                                         scale, t.num_unique, t.out->flat<float>().data(),
                                         OpStream(ctx)),
          "combine_backward"));
    }
    return absl::OkStatus();
  }
};

REGISTER_KERNEL_BUILDER(Name("SokLiteUniqueIds").Device(DEVICE_GPU), UniqueIdsOp<GPUDevice>);
REGISTER_KERNEL_BUILDER(Name("SokLiteGatherRows").Device(DEVICE_GPU).TypeConstraint<float>("dtype"),
                        (GatherRowsOp<GPUDevice, float>));
REGISTER_KERNEL_BUILDER(
    Name("SokLiteSegmentCombine").Device(DEVICE_GPU).TypeConstraint<float>("dtype"),
    (SegmentCombineOp<GPUDevice, float>));
REGISTER_KERNEL_BUILDER(Name("SokLiteSegmentCombineGrad")
                            .Device(DEVICE_GPU)
                            .HostMemory("num_unique")
                            .TypeConstraint<float>("dtype"),
                        (SegmentCombineGradOp<GPUDevice, float>));

}  // namespace sok_lite
