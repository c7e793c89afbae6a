// Per-sample reduction of embedding rows (sum / mean / sqrtn, optionally weighted) and its
// gradient. Samples are ragged: sample b owns the ids [row_splits[b], row_splits[b + 1]).
#ifndef SOK_LITE_KERNELS_CORE_COMBINE_H_
#define SOK_LITE_KERNELS_CORE_COMBINE_H_

#include <cstdint>
#include <string>

namespace sok_lite {

enum class Combiner { kSum, kMean, kSqrtn };

// Parses "sum" / "mean" / "sqrtn"; returns false for anything else.
bool ParseCombiner(const std::string& name, Combiner* combiner);

// scale[b] for samples [b0, b1): 1 (sum), 1 / sum(w) (mean) or 1 / sqrt(sum(w^2)) (sqrtn), with
// w = 1 when `weights` is null; 0 when that denominator is 0 (the sample then combines to zeros).
template <typename T>
void SampleScales(const int64_t* row_splits, const T* weights, Combiner combiner, int64_t b0,
                  int64_t b1, T* scale);

// out[b, :] = scale[b] * sum_k w[k] * rows[inverse[k], :] over the ids k of sample b, for
// samples [b0, b1). rows is [num_unique, dim], out is [batch, dim].
template <typename T>
void CombineForward(const T* rows, int64_t dim, const int32_t* inverse, const int64_t* row_splits,
                    const T* weights, const T* scale, int64_t b0, int64_t b1, T* out);

// Groups id positions by unique row (a counting sort of `inverse`): the positions of unique row
// u are order[offsets[u], offsets[u + 1]). offsets has num_unique + 1 entries, order n.
void GroupByUnique(const int32_t* inverse, int64_t n, int64_t num_unique, int64_t* offsets,
                   int64_t* order);

// sample_of[k] = the sample that id position k belongs to, for all row_splits[batch] positions.
void SampleOfPositions(const int64_t* row_splits, int64_t batch, int64_t* sample_of);

// grad_rows[u, :] = sum over positions k of u of w[k] * scale[s] * grad_out[s, :], s =
// sample_of[k], for unique rows [u0, u1). Each unique row is written by one caller only, so
// ranges can run in parallel without atomics.
template <typename T>
void CombineBackward(const T* grad_out, int64_t dim, const int64_t* offsets, const int64_t* order,
                     const int64_t* sample_of, const T* weights, const T* scale, int64_t u0,
                     int64_t u1, T* grad_rows);

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_COMBINE_H_
