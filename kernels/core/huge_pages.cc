#include "kernels/core/huge_pages.h"

#include <cstdint>
#include <cstring>
#include <mutex>
#include <unordered_map>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace sok_lite {
namespace {

// The 2 MiB-aligned interior of [p, p + bytes) as [*begin, *end); false when there is none worth
// advising.
bool HugeInterior(const void* p, size_t bytes, uintptr_t* begin, uintptr_t* end) {
  if (bytes < kHugePageMinBytes || p == nullptr) return false;
  *begin = (reinterpret_cast<uintptr_t>(p) + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  *end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHugePageBytes - 1);
  return *end > *begin;
}

}  // namespace

bool AdviseHugePagesBeforeFirstWrite(const void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  uintptr_t begin = 0, end = 0;
  if (std::strcmp(HugePageSetting(), "0") == 0 || !HugeInterior(p, bytes, &begin, &end)) {
    return false;
  }
  return madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE) == 0;
#else
  (void)p;
  (void)bytes;
  return false;
#endif
}

bool AdviseHugePages(const void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  uintptr_t begin = 0, end = 0;
  if (std::strcmp(HugePageSetting(), "1") != 0 || !HugeInterior(p, bytes, &begin, &end)) {
    return false;
  }
  static std::mutex mu;
  static std::unordered_map<uintptr_t, uintptr_t> advised;  // begin -> end
  {
    std::lock_guard<std::mutex> lock(mu);
    auto [it, added] = advised.emplace(begin, end);
    if (!added && it->second == end) return false;
    it->second = end;
  }
  void* start = reinterpret_cast<void*>(begin);
  if (madvise(start, end - begin, MADV_HUGEPAGE) != 0) return false;
#ifndef MADV_COLLAPSE
  constexpr int MADV_COLLAPSE = 25;  // Linux >= 6.1; older kernels answer EINVAL
#endif
  madvise(start, end - begin, MADV_COLLAPSE);
  return true;
#else
  (void)p;
  (void)bytes;
  return false;
#endif
}

}  // namespace sok_lite
