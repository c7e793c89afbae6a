#include "kernels/core/combine.h"

#include <algorithm>
#include <cmath>

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
                    const T* weights, const T* scale, int64_t b0, int64_t b1, T* out) {
  for (int64_t b = b0; b < b1; ++b) {
    T* dst = out + b * dim;
    std::fill(dst, dst + dim, T(0));
    for (int64_t k = row_splits[b]; k < row_splits[b + 1]; ++k) {
      const T w = weights ? weights[k] : T(1);
      const T* src = rows + static_cast<int64_t>(inverse[k]) * dim;
      for (int64_t d = 0; d < dim; ++d) dst[d] += w * src[d];
    }
    const T s = scale[b];
    if (s != T(1)) {
      for (int64_t d = 0; d < dim; ++d) dst[d] *= s;
    }
  }
}

void GroupByUnique(const int32_t* inverse, int64_t n, int64_t num_unique, int64_t* offsets,
                   int64_t* order) {
  std::fill(offsets, offsets + num_unique + 1, 0);
  for (int64_t k = 0; k < n; ++k) ++offsets[inverse[k] + 1];
  for (int64_t u = 0; u < num_unique; ++u) offsets[u + 1] += offsets[u];
  // Fill each group front to back; `offsets[u]` is used as the cursor and restored afterwards.
  for (int64_t k = 0; k < n; ++k) order[offsets[inverse[k]]++] = k;
  for (int64_t u = num_unique; u > 0; --u) offsets[u] = offsets[u - 1];
  offsets[0] = 0;
}

void SampleOfPositions(const int64_t* row_splits, int64_t batch, int64_t* sample_of) {
  for (int64_t b = 0; b < batch; ++b) {
    std::fill(sample_of + row_splits[b], sample_of + row_splits[b + 1], b);
  }
}

template <typename T>
void CombineBackward(const T* grad_out, int64_t dim, const int64_t* offsets, const int64_t* order,
                     const int64_t* sample_of, const T* weights, const T* scale, int64_t u0,
                     int64_t u1, T* grad_rows) {
  for (int64_t u = u0; u < u1; ++u) {
    T* dst = grad_rows + u * dim;
    std::fill(dst, dst + dim, T(0));
    for (int64_t j = offsets[u]; j < offsets[u + 1]; ++j) {
      const int64_t k = order[j];
      const int64_t s = sample_of[k];
      const T f = (weights ? weights[k] : T(1)) * scale[s];
      const T* src = grad_out + s * dim;
      for (int64_t d = 0; d < dim; ++d) dst[d] += f * src[d];
    }
  }
}

#define SOK_LITE_INSTANTIATE_COMBINE(T)                                                        \
  template void SampleScales<T>(const int64_t*, const T*, Combiner, int64_t, int64_t, T*);     \
  template void CombineForward<T>(const T*, int64_t, const int32_t*, const int64_t*, const T*, \
                                  const T*, int64_t, int64_t, T*);                             \
  template void CombineBackward<T>(const T*, int64_t, const int64_t*, const int64_t*,          \
                                   const int64_t*, const T*, const T*, int64_t, int64_t, T*);
SOK_LITE_INSTANTIATE_COMBINE(float)
SOK_LITE_INSTANTIATE_COMBINE(double)
#undef SOK_LITE_INSTANTIATE_COMBINE

}  // namespace sok_lite
