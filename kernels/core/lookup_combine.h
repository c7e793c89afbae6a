// Per-sample reduction of embedding rows (sum / mean / sqrtn, optionally weighted) and its
// gradient. Samples are ragged: sample b owns the ids [row_splits[b], row_splits[b + 1]).
#ifndef SOK_LITE_KERNELS_CORE_LOOKUP_COMBINE_H_
#define SOK_LITE_KERNELS_CORE_LOOKUP_COMBINE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/cpu_gpu_rules.h"

namespace sok_lite {

enum class Combiner {
  kSum = SOK_LITE_COMBINER_SUM,
  kMean = SOK_LITE_COMBINER_MEAN,
  kSqrtn = SOK_LITE_COMBINER_SQRTN,
};

// Parses "sum" / "mean" / "sqrtn"; returns false for anything else.
[[nodiscard]] bool ParseCombiner(const std::string& name, Combiner* combiner);

// scale[b] for samples [b0, b1): 1 (sum), 1 / sum(w) (mean) or 1 / sqrt(sum(w^2)) (sqrtn), with
// w = 1 when `weights` is null; 0 when that denominator is 0 (the sample then combines to zeros).
template <typename T>
void SampleScales(const int64_t* row_splits, const T* weights, Combiner combiner, int64_t b0,
                  int64_t b1, T* scale);

// out[b, :] = scale[b] * sum_k w[k] * rows[inverse[k], :] over the ids k of sample b, for
// samples [b0, b1). rows is [num_unique, dim], out is [batch, dim]. stream_out writes out with
// streaming stores (see stream_store.h): for outputs far larger than the cache.
template <typename T>
void CombineForward(const T* rows, int64_t dim, const int32_t* inverse, const int64_t* row_splits,
                    const T* weights, const T* scale, int64_t b0, int64_t b1, T* out,
                    bool stream_out = false);

// The ids of each unique row, grouped by row (a counting sort of the inverse index): row u's ids
// are entries [begin[u], begin[u + 1]) of `sample` (the id's sample) and `factor` (its
// w[k] * scale[sample]), in ascending order of position k. `factor` is empty when every factor
// is 1 (no weights, every scale 1: the sum combiner): the sum then multiplies by nothing.
template <typename T>
struct IdsByRow {
  std::vector<int64_t> begin;   // num_unique + 1
  std::vector<int32_t> sample;  // n
  std::vector<T> factor;        // n, or empty
};

// Fills `groups` from inverse [n] (every entry in [0, num_unique)) and the samples' row splits.
// batch must fit int32.
template <typename T>
void GroupIdsByRow(const int32_t* inverse, const int64_t* row_splits, int64_t batch,
                   const T* weights, const T* scale, int64_t num_unique, IdsByRow<T>* groups);

// grad_rows[u, :] = sum over the ids of row u of factor * grad_out[sample, :], for unique rows
// [u0, u1), summed in ascending order of position (the order a scatter-add over the positions
// would use, so the result does not depend on how rows are split between threads); zeros for a
// row without ids. Each row is written once, so disjoint ranges run in parallel.
template <typename T>
void CombineBackwardRows(const T* grad_out, int64_t dim, const IdsByRow<T>& groups, int64_t u0,
                         int64_t u1, T* grad_rows);

// Splits unique rows [0, num_unique) into `parts` ranges carrying about the same number of ids
// each (hot ids make equal-size ranges very unequal). bounds gets parts + 1 entries.
void BalancedRowRanges(const int64_t* begin, int64_t num_unique, int64_t parts, int64_t* bounds);

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_LOOKUP_COMBINE_H_
