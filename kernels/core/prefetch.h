// Software prefetch of table rows a few iterations ahead: random rows of a large table are
// cache and TLB misses, and overlapping them keeps step time close to flat in the table size.
#ifndef SOK_LITE_KERNELS_CORE_PREFETCH_H_
#define SOK_LITE_KERNELS_CORE_PREFETCH_H_

#include <cstdint>

namespace sok_lite {

// How many rows ahead loops over random rows prefetch.
constexpr int64_t kPrefetchDistance = 16;

// Prefetches the cache lines of `bytes` bytes at p for writing (rw = 1) or reading (rw = 0).
template <int kWrite>
inline void PrefetchBytes(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, kWrite, 3);
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_PREFETCH_H_
