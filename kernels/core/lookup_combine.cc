#include "kernels/core/lookup_combine.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/core/lookup_combine_sample.h"
#include "kernels/core/prefetch.h"
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
void GroupIdsByRow(const int32_t* inverse, const int64_t* row_splits, int64_t batch,
                   const T* weights, const T* scale, int64_t num_unique, IdsByRow<T>* groups) {
  const int64_t n = row_splits[batch];
  std::vector<int64_t>& begin = groups->begin;
  begin.assign(num_unique + 1, 0);
  for (int64_t k = 0; k < n; ++k) ++begin[inverse[k] + 1];
  for (int64_t u = 0; u < num_unique; ++u) begin[u + 1] += begin[u];
  std::vector<int64_t> next(begin.begin(), begin.end() - 1);
  groups->sample.resize(n);
  const bool unit = !weights && std::all_of(scale, scale + batch, [](T s) { return s == T(1); });
  groups->factor.resize(unit ? 0 : n);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t k = row_splits[b]; k < row_splits[b + 1]; ++k) {
      const int64_t at = next[inverse[k]]++;
      groups->sample[at] = static_cast<int32_t>(b);
      if (!unit) groups->factor[at] = (weights ? weights[k] : T(1)) * scale[b];
    }
  }
}

template <typename T>
void CombineBackwardRows(const T* grad_out, int64_t dim, const IdsByRow<T>& groups, int64_t u0,
                         int64_t u1, T* grad_rows) {
  const int32_t* sample = groups.sample.data();
  const T* factor = groups.factor.empty() ? nullptr : groups.factor.data();
  const int64_t end = groups.begin[u1];
  // A row's ids are summed in groups of up to kCombineGroup, as CombineSample sums a sample's
  // (SumRows keeps the partial sums in registers across a group). Their sample rows are random
  // reads of grad_out: fetch a few ids ahead, across rows.
  const T* group[kCombineGroup];
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t j0 = groups.begin[u], j1 = groups.begin[u + 1];
    T* dst = grad_rows + u * dim;
    if (j0 == j1) {
      std::fill(dst, dst + dim, T(0));
      continue;
    }
    for (int64_t g0 = j0; g0 < j1; g0 += kCombineGroup) {
      const int64_t g1 = std::min(j1, g0 + kCombineGroup);
      for (int64_t j = g0; j < g1; ++j) {
        if (j + kPrefetchDistance < end) {
          PrefetchBytes<0>(grad_out + static_cast<int64_t>(sample[j + kPrefetchDistance]) * dim,
                           dim * sizeof(T));
        }
        group[j - g0] = grad_out + static_cast<int64_t>(sample[j]) * dim;
      }
      SumRows(group, factor ? factor + g0 : nullptr, g1 - g0, dim, g0 != j0, dst);
    }
  }
}

void BalancedRowRanges(const int64_t* begin, int64_t num_unique, int64_t parts, int64_t* bounds) {
  const int64_t n = begin[num_unique];
  bounds[0] = 0;
  for (int64_t p = 1; p < parts; ++p) {
    const int64_t target = n * p / parts;
    bounds[p] =
        std::max(bounds[p - 1],
                 static_cast<int64_t>(std::lower_bound(begin, begin + num_unique, target) - begin));
  }
  bounds[parts] = num_unique;
}

#define SOK_LITE_INSTANTIATE_COMBINE(T)                                                        \
  template void SampleScales<T>(const int64_t*, const T*, Combiner, int64_t, int64_t, T*);     \
  template void CombineForward<T>(const T*, int64_t, const int32_t*, const int64_t*, const T*, \
                                  const T*, int64_t, int64_t, T*, bool);                       \
  template void GroupIdsByRow<T>(const int32_t*, const int64_t*, int64_t, const T*, const T*,  \
                                 int64_t, IdsByRow<T>*);                                       \
  template void CombineBackwardRows<T>(const T*, int64_t, const IdsByRow<T>&, int64_t, int64_t, T*);
SOK_LITE_INSTANTIATE_COMBINE(float)
SOK_LITE_INSTANTIATE_COMBINE(double)
#undef SOK_LITE_INSTANTIATE_COMBINE

}  // namespace sok_lite
