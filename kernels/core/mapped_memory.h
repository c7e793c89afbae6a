// Memory that goes back to the system when freed: blocks of kMappedMinBytes or more are mapped
// and unmapped, as a hash table's row chunks are. For what a table of many rows allocates and
// frees as it runs: its bookkeeping arrays (which grow, and shrink when rows go to disk), and the
// scratch of a tiered step (spill candidates, records written and read, rows read back, the
// probes of a batch: megabytes, freed before the call returns). glibc keeps freed blocks in the
// arena of the thread that freed them, and once any large block was freed it serves every
// request under 32 MiB from those arenas, so such blocks would stay in the process's RSS on top
// of the table's ram_budget (docs/benchmarks.md, "Tables larger than memory").
// A scratch block of 2 MiB or more is mapped for huge pages (MapHugeAligned).
#ifndef SOK_LITE_KERNELS_CORE_MAPPED_MEMORY_H_
#define SOK_LITE_KERNELS_CORE_MAPPED_MEMORY_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

namespace sok_lite {

constexpr size_t kMappedMinBytes = size_t{1} << 20;
constexpr size_t kHugePageBytes = size_t{2} << 20;

// SOK_LITE_HUGE_PAGES: unset (huge pages for new buffers), "1" (also collapse written ones) or
// "0" (none); kernels/core/huge_pages.h. Read once per translation unit: static, because the
// local static of an inline function is one object for the whole process (GNU unique), shared
// with any other library built from these headers that was loaded first.
static inline const char* HugePageSetting() {
  static const char* setting = [] {
    const char* env = std::getenv("SOK_LITE_HUGE_PAGES");
    return env == nullptr ? "" : env;
  }();
  return setting;
}

// populate: fault the pages in now, in one call (a block about to be written in full: cheaper
// than a fault per page as it is written).
inline void* MappedAllocate(size_t bytes, bool populate) {
  if (bytes < kMappedMinBytes) return ::operator new(bytes);
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

// A block of `bytes` mapped at a 2 MiB boundary and advised for huge pages before its first write
// (populate: faulted in now), or nullptr where huge pages are off. For a step's scratch, mapped
// anew on every call: on a virtual machine a 4 KiB page faulted in for the first time cost
// ~1.3 us, and 2 MiB pages for the scratch took ~4.6% off a tiered step (docs/benchmarks.md,
// "Huge pages for a step's scratch").
inline void* MapHugeAligned(size_t bytes, bool populate) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (std::strcmp(HugePageSetting(), "0") == 0) return nullptr;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t span = bytes + kHugePageBytes;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  // Keep [p, end): unmap what lies before the first 2 MiB boundary and after the block.
  char* first = static_cast<char*>(raw);
  char* p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(first) + kHugePageBytes - 1) &
                                    ~(uintptr_t{kHugePageBytes} - 1));
  char* end = p + (bytes + page - 1) / page * page;
  if (p > first) munmap(first, p - first);
  if (first + span > end) munmap(end, first + span - end);
  madvise(p, bytes, MADV_HUGEPAGE);  // refused (no transparent huge pages): 4 KiB pages
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux >= 5.14; older kernels answer EINVAL
#endif
  if (populate && madvise(p, bytes, MADV_POPULATE_WRITE) != 0) {
    for (size_t i = 0; i < bytes; i += page) p[i] = 0;  // fault in a page at a time
  }
  return p;
#else
  (void)bytes;
  (void)populate;
  return nullptr;
#endif
}

// A step's scratch: huge pages from one huge page up, else as MappedAllocate.
inline void* ScratchAllocate(size_t bytes, bool populate) {
  if (bytes >= kHugePageBytes) {
    if (void* p = MapHugeAligned(bytes, populate)) return p;
  }
  return MappedAllocate(bytes, populate);
}

// `bytes` must be the size the block was allocated with.
inline void MappedFree(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (bytes < kMappedMinBytes) {
    ::operator delete(p);
  } else {
    munmap(p, bytes);
  }
}

template <typename T>
struct MappedAllocator {
  using value_type = T;
  MappedAllocator() = default;
  template <typename U>
  MappedAllocator(const MappedAllocator<U>&) {}  // NOLINT: converting, as std::allocator
  // A vector writes its storage as it fills: populated (capacity reserved past its size too).
  T* allocate(size_t n) { return static_cast<T*>(ScratchAllocate(n * sizeof(T), true)); }
  void deallocate(T* p, size_t n) { MappedFree(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const MappedAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const MappedAllocator<U>&) const {
    return false;
  }
};

// A step's scratch.
template <typename T>
using ScratchVector = std::vector<T, MappedAllocator<T>>;

// An array of n T left uninitialized; populate: see MappedAllocate.
struct ScratchDelete {
  size_t bytes = 0;
  void operator()(void* p) const { MappedFree(p, bytes); }
};
template <typename T>
using ScratchArray = std::unique_ptr<T[], ScratchDelete>;
template <typename T>
ScratchArray<T> NewScratchArray(size_t n, bool populate) {
  return ScratchArray<T>(static_cast<T*>(ScratchAllocate(n * sizeof(T), populate)),
                         ScratchDelete{n * sizeof(T)});
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_MAPPED_MEMORY_H_
