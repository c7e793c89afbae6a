// The per-sample combine shared by CombineForward (rows gathered by inverse index) and
// HashTable::LookupCombine (rows read where the hash table stores them).
#ifndef SOK_LITE_KERNELS_CORE_LOOKUP_COMBINE_SAMPLE_H_
#define SOK_LITE_KERNELS_CORE_LOOKUP_COMBINE_SAMPLE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/core/row_sum.h"
#include "kernels/core/stream_store.h"

namespace sok_lite {

// How many rows CombineSample sums at once: the row row_of(k) gives must stay valid until
// row_of(k + kCombineGroup - 1) has been called (a ring of kCombineGroup scratch rows indexed by
// k % kCombineGroup does).
constexpr int64_t kCombineGroup = 16;

// dst[0, dim) = scale * sum_k w_k * row_of(k) over the ids k in [k0, k1) of one sample (w_k =
// weights[k], or 1 when weights is null); zeros for an empty sample. row_of(k) is called once for
// every k, in order, and gives the row of id k or null (not available); returns false, leaving
// dst untouched, if any row was null. acc: dim elements of scratch. stream_out writes dst with
// streaming stores.
template <typename T, typename RowOf>
bool CombineSample(int64_t k0, int64_t k1, int64_t dim, const T* weights, T scale, bool stream_out,
                   RowOf row_of, T* acc, T* dst) {
  if (k1 - k0 == 1 && !weights && scale == T(1)) {  // a copy of one row
    const T* src = row_of(k0);
    if (!src) return false;
    if (stream_out) {
      StreamRow(src, dim, dst);
    } else {
      std::memcpy(dst, src, dim * sizeof(T));
    }
    return true;
  }
  // The rows are summed in groups of up to kCombineGroup, their pointers collected first, so the
  // partial sums stay in registers across a group (SumRows). A sample of one group is summed
  // straight into dst when nothing follows the sum: dst is only written once every row is known.
  const T* group[kCombineGroup];
  T* sum = (k0 < k1 && k1 - k0 <= kCombineGroup && scale == T(1) && !stream_out) ? dst : acc;
  bool complete = true;
  for (int64_t g0 = k0; g0 < k1; g0 += kCombineGroup) {
    const int64_t g1 = std::min(k1, g0 + kCombineGroup);
    for (int64_t k = g0; k < g1; ++k) {
      group[k - g0] = row_of(k);  // called even after a miss: it may advance a pipeline
      complete = complete && group[k - g0];
    }
    if (complete) SumRows(group, weights ? weights + g0 : nullptr, g1 - g0, dim, g0 != k0, sum);
  }
  if (!complete) return false;
  if (sum == dst) return true;
  if (k0 == k1) std::fill(acc, acc + dim, T(0));
  if (scale != T(1)) {
    for (int64_t d = 0; d < dim; ++d) acc[d] *= scale;
  }
  if (stream_out) {
    StreamRow(acc, dim, dst);
  } else {
    std::memcpy(dst, acc, dim * sizeof(T));
  }
  return true;
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_LOOKUP_COMBINE_SAMPLE_H_
