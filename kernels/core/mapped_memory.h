// Memory that goes back to the system when freed: blocks of kMappedMinBytes or more are mapped
// and unmapped, as a hash table's row chunks are. For what a table of many rows allocates and
// frees as it runs: its bookkeeping arrays (which grow, and shrink when rows go to disk), and the
// scratch of a tiered step (spill candidates, records written and read, rows read back, the
// probes of a batch: megabytes, freed before the call returns). glibc keeps freed blocks in the
// arena of the thread that freed them, and once any large block was freed it serves every
// request under 32 MiB from those arenas, so such blocks would stay in the process's RSS on top
// of the table's ram_budget (docs/benchmarks.md, "Tables larger than memory").
#ifndef SOK_LITE_KERNELS_CORE_MAPPED_MEMORY_H_
#define SOK_LITE_KERNELS_CORE_MAPPED_MEMORY_H_

#include <sys/mman.h>

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace sok_lite {

constexpr size_t kMappedMinBytes = size_t{1} << 20;

// populate: fault the pages in now, in one call (a block about to be written in full: cheaper
// than a fault per page as it is written).
inline void* MappedAllocate(size_t bytes, bool populate) {
  if (bytes < kMappedMinBytes) return ::operator new(bytes);
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
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
  T* allocate(size_t n) { return static_cast<T*>(MappedAllocate(n * sizeof(T), true)); }
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
  return ScratchArray<T>(static_cast<T*>(MappedAllocate(n * sizeof(T), populate)),
                         ScratchDelete{n * sizeof(T)});
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_MAPPED_MEMORY_H_
