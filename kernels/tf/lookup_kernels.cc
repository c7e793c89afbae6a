// CPU functors of the lookup family's kernels (lookup_kernels.h): the math lives in kernels/core.
#include "kernels/tf/lookup_kernels.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/lookup_combine.h"
#include "kernels/core/lookup_unique.h"
#include "kernels/core/lookup_validate.h"
#include "kernels/core/prefetch.h"
#include "kernels/core/stream_store.h"
#include "kernels/tf/cpu_parallel.h"
#include "kernels/tf/table_dtype.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpInputList;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

template <>
class UniqueIdsFunctor<CPUDevice> {
 public:
  absl::Status Run(OpKernelContext* ctx, const UniqueIdsArgs& args, UniqueIdsTables* tables) {
    const OpInputList& ids = tables->ids;
    const OpInputList& splits = tables->row_splits;
    const int n_tables = ids.size();
    uniques_.resize(n_tables);
    for (int t = 0; t < n_tables; ++t) {
      uniques_[t].reset(new int64_t[std::max<int64_t>(ids[t].NumElements(), 1)]);  // uninitialized
    }
    // Two tasks per table, run side by side: the checks, and the dedup (safe on unchecked ids:
    // any int64 value is a valid key to it; its result is dropped if a check fails).
    ParallelFor(ctx, 2 * n_tables, 50 * (1 + ids[0].NumElements()), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t t = i / 2;
        const int64_t n = ids[t].NumElements();
        const int64_t batch = splits[t].NumElements() - 1;
        const int64_t* id = ids[t].flat<int64_t>().data();
        const int64_t* rs = splits[t].flat<int64_t>().data();
        if (i % 2 == 0) {
          tables->problems[t] = CheckRowSplits(rs, batch, n);
          if (tables->problems[t].empty()) {
            tables->problems[t] = CheckIds(id, rs, batch, args.num_rows[t], args.hotness[t]);
          }
        } else {
          tables->counts[t] = UniqueIds(id, n, uniques_[t].get(), tables->inverse[t]);
        }
      }
    });
    return absl::OkStatus();
  }

  absl::Status CopyUnique(OpKernelContext* ctx, int t, int64_t count, int64_t* out) {
    std::copy(uniques_[t].get(), uniques_[t].get() + count, out);
    return absl::OkStatus();
  }

 private:
  std::vector<std::unique_ptr<int64_t[]>> uniques_;  // n ids each
};

template <>
absl::Status GatherIndexCheck<CPUDevice>::Run(OpKernelContext* ctx, const int64_t* indices,
                                              int64_t u, int64_t num_rows, bool* found,
                                              int64_t* value) {
  for (int64_t i = 0; i < u; ++i) {
    if (indices[i] < 0 || indices[i] >= num_rows) {
      *found = true;
      *value = indices[i];
      return absl::OkStatus();
    }
  }
  *found = false;
  return absl::OkStatus();
}

template <typename T, typename Stored>
struct GatherRowsFunctor<CPUDevice, T, Stored> {
  static absl::Status Compute(OpKernelContext* ctx, const Stored* src, int64_t dim,
                              const int64_t* indices, int64_t u, T* dst) {
    ParallelFor(ctx, u, 4 * dim, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        if (i + kPrefetchDistance < i1) {
          PrefetchBytes<0>(src + indices[i + kPrefetchDistance] * dim, dim * sizeof(Stored));
        }
        ReadRow(src + indices[i] * dim, dim, dst + i * dim);
      }
    });
    return absl::OkStatus();
  }
};

template <>
absl::Status CombineSegmentChecks<CPUDevice>::Run(OpKernelContext* ctx, const CombineSegments& seg,
                                                  int64_t num_unique, std::string* problem) {
  *problem = CheckRowSplits(seg.row_splits, seg.batch, seg.n);
  if (problem->empty()) *problem = CheckInverse(seg.inverse, seg.n, num_unique);
  return absl::OkStatus();
}

template <typename T>
struct SegmentCombineFunctor<CPUDevice, T> {
  static absl::Status Forward(OpKernelContext* ctx, const T* rows, int64_t dim,
                              const CombineSegments& seg, Combiner combiner, Tensor* out) {
    std::vector<T> scale(seg.batch);
    const T* weights = static_cast<const T*>(seg.weights);
    const int64_t per_sample = (1 + seg.n / std::max<int64_t>(seg.batch, 1)) * (2 * dim + 4);
    const bool stream = out->TotalBytes() >= kStreamOutputBytes;
    T* dst = out->flat<T>().data();
    ParallelFor(ctx, seg.batch, per_sample, [&](int64_t b0, int64_t b1) {
      SampleScales(seg.row_splits, weights, combiner, b0, b1, scale.data());
      CombineForward(rows, dim, seg.inverse, seg.row_splits, weights, scale.data(), b0, b1, dst,
                     stream);
    });
    return absl::OkStatus();
  }

  static absl::Status Backward(OpKernelContext* ctx, const T* g, int64_t dim,
                               const CombineSegments& seg, Combiner combiner, int64_t num_unique,
                               Tensor* out) {
    const T* weights = static_cast<const T*>(seg.weights);
    std::vector<T> scale(seg.batch);
    SampleScales(seg.row_splits, weights, combiner, 0, seg.batch, scale.data());
    // Blocks of (unique rows x 16-column slices): each task owns one block, so the scatter-add
    // needs no atomics and no sort. Column slices first (perfect balance), then row ranges
    // balanced by id count once there are more threads than slices. Half the pool's threads:
    // the scatter-add is bound by memory, and on 2 threads two blocks took 2.6x as long as
    // one (docs/benchmarks.md), while TF's other threads compete for the same cores.
    const int64_t threads =
        std::max(1, ctx->device()->tensorflow_cpu_worker_threads()->num_threads / 2);
    const int64_t col_blocks = std::min<int64_t>(threads, (dim + 15) / 16);
    const int64_t row_blocks =
        std::min<int64_t>((threads + col_blocks - 1) / col_blocks, num_unique);
    std::vector<int64_t> bounds(row_blocks + 1);
    BalancedUniqueRanges(seg.inverse, seg.n, num_unique, row_blocks, bounds.data());
    T* dst = out->flat<T>().data();
    const int64_t cost = seg.n * (2 * dim / col_blocks + 4);
    ParallelFor(ctx, row_blocks * col_blocks, cost, [&](int64_t b0, int64_t b1) {
      for (int64_t block = b0; block < b1; ++block) {
        const int64_t r = block / col_blocks, c = block % col_blocks;
        const int64_t d0 = dim * c / col_blocks, d1 = dim * (c + 1) / col_blocks;
        CombineBackwardBlock(g, dim, seg.inverse, seg.row_splits, seg.batch, weights, scale.data(),
                             bounds[r], bounds[r + 1], d0, d1, dst);
      }
    });
    return absl::OkStatus();
  }
};

REGISTER_KERNEL_BUILDER(Name("SokLiteRowSplitsFromRowIds").Device(DEVICE_CPU),
                        RowSplitsFromRowIdsOp<CPUDevice>);
REGISTER_KERNEL_BUILDER(Name("SokLiteUniqueIds").Device(DEVICE_CPU), UniqueIdsOp<CPUDevice>);

#define SOK_LITE_REGISTER_CPU(T)                                                                   \
  REGISTER_KERNEL_BUILDER(Name("SokLiteGatherRows").Device(DEVICE_CPU).TypeConstraint<T>("dtype"), \
                          GatherRowsOp<CPUDevice, T>);                                             \
  REGISTER_KERNEL_BUILDER(                                                                         \
      Name("SokLiteSegmentCombine").Device(DEVICE_CPU).TypeConstraint<T>("dtype"),                 \
      SegmentCombineOp<CPUDevice, T>);                                                             \
  REGISTER_KERNEL_BUILDER(                                                                         \
      Name("SokLiteSegmentCombineGrad").Device(DEVICE_CPU).TypeConstraint<T>("dtype"),             \
      SegmentCombineGradOp<CPUDevice, T>);
SOK_LITE_REGISTER_CPU(float)
SOK_LITE_REGISTER_CPU(double)
#undef SOK_LITE_REGISTER_CPU

}  // namespace sok_lite
