// Deduplication of embedding ids: the first step of every lookup, before any row is read or any
// id crosses the wire.
#ifndef SOK_LITE_KERNELS_CORE_UNIQUE_H_
#define SOK_LITE_KERNELS_CORE_UNIQUE_H_

#include <cstdint>
#include <functional>

namespace sok_lite {

// Writes the distinct values of ids[0, n) to `unique` in order of first occurrence and, for every
// i, the position of ids[i] in `unique` to inverse[i]. `unique` must have room for n values.
// Returns the number of distinct values. n must be < 2^31.
template <typename K>
int64_t UniqueIds(const K* ids, int64_t n, K* unique, int32_t* inverse);

// Runs fn over disjoint ranges covering [0, n), possibly in parallel.
using RangeRunner = std::function<void(int64_t n, const std::function<void(int64_t, int64_t)>& fn)>;

// UniqueIds with the same outputs (same order), split over `run`'s threads: ids are sharded by
// hash, each shard is deduplicated on its own, and a prefix count over first occurrences gives
// every distinct id its position. Worth it from tens of thousands of ids on.
template <typename K>
int64_t UniqueIdsParallel(const K* ids, int64_t n, K* unique, int32_t* inverse,
                          const RangeRunner& run);

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_UNIQUE_H_
