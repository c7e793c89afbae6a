// Software prefetch of table rows a few iterations ahead: random rows of a large table are
// cache and TLB misses, and overlapping them keeps step time close to flat in the table size.
#ifndef SOK_LITE_KERNELS_CORE_PREFETCH_H_
#define SOK_LITE_KERNELS_CORE_PREFETCH_H_

#include <algorithm>
#include <cstdint>

namespace sok_lite {

// How many rows ahead loops over random rows prefetch.
constexpr int64_t kPrefetchDistance = 16;

// One cache line at p into all cache levels. On x86-64 an asm volatile: GCC at -O2 classifies a
// function whose only effect is __builtin_prefetch as const and then deletes the calls to it
// (the optimizer kernels' prefetch callbacks lost all their prefetches that way).
inline void PrefetchLine(const char* p, bool write) {
#if defined(__x86_64__) && defined(__GNUC__)
  (void)write;  // prefetchw needs PRFCHW, not in baseline x86-64
  asm volatile("prefetcht0 %0" : : "m"(*p));
#else
  if (write) {
    __builtin_prefetch(p, 1, 3);
  } else {
    __builtin_prefetch(p, 0, 3);
  }
#endif
}

// Prefetches the cache lines of `bytes` bytes at p for writing (rw = 1) or reading (rw = 0).
template <int kWrite>
inline void PrefetchBytes(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) PrefetchLine(c + off, kWrite != 0);
}

// Runs body(i) for i in [0, n) in order, each fetch(i) called kPrefetchDistance iterations
// before its body(i) (the first ones before the loop): for loops whose every iteration misses
// the cache at an address known from i alone (a disk index's bucket of keys[i]).
template <typename Fetch, typename Body>
inline void ForEachFetchedAhead(int64_t n, Fetch fetch, Body body) {
  for (int64_t i = 0; i < std::min(n, kPrefetchDistance); ++i) fetch(i);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) fetch(i + kPrefetchDistance);
    body(i);
  }
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_PREFETCH_H_
