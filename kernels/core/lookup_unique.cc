#include "kernels/core/lookup_unique.h"

#include <vector>

#include "kernels/core/cpu_gpu_rules.h"

namespace sok_lite {

template <typename K>
int64_t UniqueIds(const K* ids, int64_t n, K* unique, int32_t* inverse) {
  // Open addressing with linear probing; a slot holds an index into `unique` (or -1), so no key
  // value is reserved as the empty marker.
  uint64_t capacity = 16;
  while (capacity < static_cast<uint64_t>(n) * 2) capacity <<= 1;
  const uint64_t mask = capacity - 1;
  std::vector<int32_t> slots(capacity, -1);
  int32_t num_unique = 0;
  for (int64_t i = 0; i < n; ++i) {
    const K key = ids[i];
    uint64_t pos = SplitMix64Finalizer(static_cast<uint64_t>(key)) & mask;
    while (true) {
      const int32_t slot = slots[pos];
      if (slot < 0) {
        slots[pos] = num_unique;
        unique[num_unique] = key;
        inverse[i] = num_unique++;
        break;
      }
      if (unique[slot] == key) {
        inverse[i] = slot;
        break;
      }
      pos = (pos + 1) & mask;
    }
  }
  return num_unique;
}

template int64_t UniqueIds<int32_t>(const int32_t*, int64_t, int32_t*, int32_t*);
template int64_t UniqueIds<int64_t>(const int64_t*, int64_t, int64_t*, int32_t*);

template <typename T>
const T* SumRepeatedRows(const int64_t* ids, int64_t n, const T* grads, int64_t dim,
                         std::vector<int64_t>* unique, std::vector<T>* summed) {
  unique->resize(n);
  std::vector<int32_t> inverse(n);
  const int64_t u = UniqueIds(ids, n, unique->data(), inverse.data());
  unique->resize(u);
  if (u == n) return grads;
  summed->assign(u * dim, T(0));
  for (int64_t i = 0; i < n; ++i) {
    T* dst = summed->data() + static_cast<int64_t>(inverse[i]) * dim;
    for (int64_t d = 0; d < dim; ++d) dst[d] += grads[i * dim + d];
  }
  return summed->data();
}

template const float* SumRepeatedRows<float>(const int64_t*, int64_t, const float*, int64_t,
                                             std::vector<int64_t>*, std::vector<float>*);
template const double* SumRepeatedRows<double>(const int64_t*, int64_t, const double*, int64_t,
                                               std::vector<int64_t>*, std::vector<double>*);

}  // namespace sok_lite
