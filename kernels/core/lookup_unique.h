// Deduplication of embedding ids: the first step of every lookup, before any row is read or any
// id crosses the wire.
#ifndef SOK_LITE_KERNELS_CORE_LOOKUP_UNIQUE_H_
#define SOK_LITE_KERNELS_CORE_LOOKUP_UNIQUE_H_

#include <cstdint>
#include <vector>

namespace sok_lite {

// Writes the distinct values of ids[0, n) to `unique` in order of first occurrence and, for every
// i, the position of ids[i] in `unique` to inverse[i]. `unique` must have room for n values.
// Returns the number of distinct values. n must be < 2^31.
template <typename K>
int64_t UniqueIds(const K* ids, int64_t n, K* unique, int32_t* inverse);

// Deduplicates ids[0, n) into `unique` (first-occurrence order) and sums the gradient rows
// grads[i, :dim] of repeated ids, so that every row is then updated exactly once. Returns the
// gradient of unique[j] at row j: `grads` itself when no id repeats, else summed->data().
template <typename T>
const T* SumRepeatedRows(const int64_t* ids, int64_t n, const T* grads, int64_t dim,
                         std::vector<int64_t>* unique, std::vector<T>* summed);

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_LOOKUP_UNIQUE_H_
