// Per-sample reduction of embedding rows (sum / mean / sqrtn, optionally weighted) and its
// gradient. Samples are ragged: sample b owns the ids [row_splits[b], row_splits[b + 1]).
#ifndef SOK_LITE_KERNELS_CORE_LOOKUP_COMBINE_H_
#define SOK_LITE_KERNELS_CORE_LOOKUP_COMBINE_H_

#include <cstdint>
#include <string>

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

// Adds grad_out into the rows it came from, restricted to unique rows [u0, u1) and columns
// [d0, d1): grad_rows[u, d] = sum over positions k with inverse[k] = u of
// w[k] * scale[s] * grad_out[s, d], s being the sample of k. Every position is scanned; writes
// stay inside the (rows x columns) block, so disjoint blocks can run in parallel without atomics.
// The block is zeroed first.
template <typename T>
void CombineBackwardBlock(const T* grad_out, int64_t dim, const int32_t* inverse,
                          const int64_t* row_splits, int64_t batch, const T* weights,
                          const T* scale, int64_t u0, int64_t u1, int64_t d0, int64_t d1,
                          T* grad_rows);

// Splits unique rows [0, num_unique) into `parts` ranges carrying about the same number of id
// positions each (hot ids make equal-size ranges very unequal). bounds gets parts + 1 entries.
void BalancedUniqueRanges(const int32_t* inverse, int64_t n, int64_t num_unique, int64_t parts,
                          int64_t* bounds);

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_LOOKUP_COMBINE_H_
