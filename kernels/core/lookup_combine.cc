#include "kernels/core/lookup_combine.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/core/lookup_combine_sample.h"
#include "kernels/core/stream_store.h"

namespace sok_lite {

bool ParseCombiner(const std::string& name, Combiner* combiner) {
  if (name == "sum") {
    *combiner = Combiner::kSum;
  } else if (name == "mean") {
    *combiner = Combiner::kMean;
  } else if (name == "sqrtn") {
    *combiner = Combiner::kSqrtn;
  } else {
    return false;
  }
  return true;
}

template <typename T>
void SampleScales(const int64_t* row_splits, const T* weights, Combiner combiner, int64_t b0,
                  int64_t b1, T* scale) {
  for (int64_t b = b0; b < b1; ++b) {
    if (combiner == Combiner::kSum) {
      scale[b] = T(1);
      continue;
    }
    T denom = T(0);
    for (int64_t k = row_splits[b]; k < row_splits[b + 1]; ++k) {
      const T w = weights ? weights[k] : T(1);
      denom += combiner == Combiner::kMean ? w : w * w;
    }
    if (combiner == Combiner::kSqrtn) denom = std::sqrt(denom);
    scale[b] = denom == T(0) ? T(0) : T(1) / denom;
  }
}

template <typename T>
void CombineForward(const T* rows, int64_t dim, const int32_t* inverse, const int64_t* row_splits,
                    const T* weights, const T* scale, int64_t b0, int64_t b1, T* out,
                    bool stream_out) {
  std::vector<T> acc(dim);
  const auto row_of = [=](int64_t k) { return rows + static_cast<int64_t>(inverse[k]) * dim; };
  for (int64_t b = b0; b < b1; ++b) {
    CombineSample(row_splits[b], row_splits[b + 1], dim, weights, scale[b], stream_out, row_of,
                  acc.data(), out + b * dim);
  }
  if (stream_out) StreamFence();
}

template <typename T>
void CombineBackwardBlock(const T* grad_out, int64_t dim, const int32_t* inverse,
                          const int64_t* row_splits, int64_t batch, const T* weights,
                          const T* scale, int64_t u0, int64_t u1, int64_t d0, int64_t d1,
                          T* grad_rows) {
  for (int64_t u = u0; u < u1; ++u)
    std::fill(grad_rows + u * dim + d0, grad_rows + u * dim + d1, T(0));
  for (int64_t b = 0; b < batch; ++b) {
    const T* src = grad_out + b * dim;
    for (int64_t k = row_splits[b]; k < row_splits[b + 1]; ++k) {
      const int64_t u = inverse[k];
      if (u < u0 || u >= u1) continue;
      const T f = (weights ? weights[k] : T(1)) * scale[b];
      T* dst = grad_rows + u * dim;
      for (int64_t d = d0; d < d1; ++d) dst[d] += f * src[d];
    }
  }
}

void BalancedUniqueRanges(const int32_t* inverse, int64_t n, int64_t num_unique, int64_t parts,
                          int64_t* bounds) {
  bounds[0] = 0;
  bounds[parts] = num_unique;
  if (parts == 1) return;
  std::vector<int64_t> counts(num_unique, 0);
  for (int64_t k = 0; k < n; ++k) ++counts[inverse[k]];
  int64_t u = 0, seen = 0;
  for (int64_t p = 1; p < parts; ++p) {
    const int64_t target = n * p / parts;
    while (u < num_unique && seen + counts[u] <= target) seen += counts[u++];
    bounds[p] = u;
  }
}

#define SOK_LITE_INSTANTIATE_COMBINE(T)                                                         \
  template void SampleScales<T>(const int64_t*, const T*, Combiner, int64_t, int64_t, T*);      \
  template void CombineForward<T>(const T*, int64_t, const int32_t*, const int64_t*, const T*,  \
                                  const T*, int64_t, int64_t, T*, bool);                        \
  template void CombineBackwardBlock<T>(const T*, int64_t, const int32_t*, const int64_t*,      \
                                        int64_t, const T*, const T*, int64_t, int64_t, int64_t, \
                                        int64_t, T*);
SOK_LITE_INSTANTIATE_COMBINE(float)
SOK_LITE_INSTANTIATE_COMBINE(double)
#undef SOK_LITE_INSTANTIATE_COMBINE

}  // namespace sok_lite
