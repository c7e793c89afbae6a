// Huge pages for large tables: rows of a table of gigabytes are read and written at random, and
// with 4 KiB pages nearly every row access also misses the TLB (the page tables of a 1 GiB
// array are 2 MiB themselves). Backing such a table with 2 MiB pages removes most of those
// misses. A buffer that is advised before its first write is faulted in as 2 MiB pages at about
// the cost of 4 KiB ones, so new tables and slots get that by default; collapsing the pages of a
// buffer that is already written costs time once (up to seconds per GiB on a virtual machine), so
// that is opt-in: SOK_LITE_HUGE_PAGES=1 (=0 turns both off, and the huge pages of a step's
// scratch: kernels/core/mapped_memory.h). Linux only; a no-op elsewhere and for small buffers.
// Measurements: docs/benchmarks.md, "Huge pages".
#ifndef SOK_LITE_KERNELS_CORE_HUGE_PAGES_H_
#define SOK_LITE_KERNELS_CORE_HUGE_PAGES_H_

#include <cstddef>
#include <memory>

#include "kernels/core/mapped_memory.h"

namespace sok_lite {

// Buffers below this size are left alone: a few huge pages save nothing.
constexpr size_t kHugePageMinBytes = size_t{32} << 20;

// Asks the kernel to back the 2 MiB-aligned interior of [p, p + bytes) with huge pages, and to
// collapse the pages already there now (MADV_COLLAPSE, Linux >= 6.1) rather than in the
// background. Done once per buffer (by its address range); failures are ignored, since the advice
// only changes speed. Returns whether advice was given by this call.
bool AdviseHugePages(const void* p, size_t bytes);

// Asks the kernel to back the 2 MiB-aligned interior of [p, p + bytes), a buffer not yet written,
// with huge pages when it is first written: nothing is collapsed. On unless SOK_LITE_HUGE_PAGES=0.
// Returns whether advice was given.
bool AdviseHugePagesBeforeFirstWrite(const void* p, size_t bytes);

// MappedAllocator, advising huge pages for every block before its elements are constructed: for
// the large arrays a hash table reaches at random per key (its index, its rows' bookkeeping),
// which grow and shrink with the rows in RAM.
template <typename T>
struct HugePageAllocator : MappedAllocator<T> {
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: converting, as std::allocator
  T* allocate(size_t n) {
    // Not populated: pages faulted in before the advice would stay 4 KiB.
    T* p = static_cast<T*>(MappedAllocate(n * sizeof(T), false));
    AdviseHugePagesBeforeFirstWrite(p, n * sizeof(T));
    return p;
  }
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_HUGE_PAGES_H_
