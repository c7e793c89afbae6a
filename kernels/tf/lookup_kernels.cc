// CPU functors of the lookup family's kernels (lookup_kernels.h): the math lives in kernels/core.
#include "kernels/tf/lookup_kernels.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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
                                              int64_t* position, int64_t* value) {
  for (int64_t i = 0; i < u; ++i) {
    if (indices[i] < 0 || indices[i] >= num_rows) {
      *found = true;
      *position = i;
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

  static absl::Status Backward(OpKernelContext* ctx,
                               const std::vector<CombineGradTable<T>>& tables) {
    for (const CombineGradTable<T>& t : tables) {
      if (t.seg.batch > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a batch of ", t.seg.batch, " samples: the gradient takes at most 2^31 - 1"));
      }
    }
    // Each unique row sums its own ids (grouped by a counting sort) and is written once: no
    // atomics, no zeroing, and every thread does its share of the ids (a scatter-add split by
    // rows would have each thread scan all of them). Two passes, each over all tables side by
    // side: group each table's ids, then sum ranges of rows of about equal id counts.
    const int64_t threads = ctx->device()->tensorflow_cpu_worker_threads()->num_threads;
    const int64_t num_tables = static_cast<int64_t>(tables.size());
    std::vector<IdsByRow<T>> groups(num_tables);
    std::vector<std::vector<int64_t>> bounds(num_tables);
    int64_t total_ids = 0;
    for (const CombineGradTable<T>& t : tables) total_ids += t.seg.n;
    ParallelFor(ctx, num_tables, 20 * (1 + total_ids / num_tables), [&](int64_t t0, int64_t t1) {
      for (int64_t i = t0; i < t1; ++i) {
        const CombineGradTable<T>& t = tables[i];
        const T* weights = static_cast<const T*>(t.seg.weights);
        std::vector<T> scale(t.seg.batch);
        SampleScales(t.seg.row_splits, weights, t.combiner, 0, t.seg.batch, scale.data());
        GroupIdsByRow(t.seg.inverse, t.seg.row_splits, t.seg.batch, weights, scale.data(),
                      t.num_unique, &groups[i]);
        // Ranges of ~100k cycles at least: a one-hot feature's few thousand ids cost less
        // than handing them to another thread; the tables themselves then run side by side.
        const int64_t parts =
            std::clamp<int64_t>(t.seg.n * CostPerId(t.dim) / 100000, 1,
                                std::max<int64_t>(1, std::min(4 * threads, t.num_unique)));
        bounds[i].resize(parts + 1);
        BalancedRowRanges(groups[i].begin.data(), t.num_unique, parts, bounds[i].data());
      }
    });
    std::vector<std::pair<int64_t, int64_t>> ranges;  // (table, range)
    int64_t cost = 0;
    for (int64_t i = 0; i < num_tables; ++i) {
      for (size_t p = 0; p + 1 < bounds[i].size(); ++p) ranges.emplace_back(i, p);
      cost += tables[i].seg.n * CostPerId(tables[i].dim);
    }
    const int64_t num_ranges = static_cast<int64_t>(ranges.size());
    ParallelFor(ctx, num_ranges, 1 + cost / num_ranges, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const auto [i, p] = ranges[r];
        const CombineGradTable<T>& t = tables[i];
        CombineBackwardRows(t.grads, t.dim, groups[i], bounds[i][p], bounds[i][p + 1],
                            t.out->template flat<T>().data());
      }
    });
    return absl::OkStatus();
  }

 private:
  // Rough cycles to add one id's gradient row into its unique row.
  static int64_t CostPerId(int64_t dim) { return 2 * dim + 8; }
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
