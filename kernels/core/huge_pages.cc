#include "kernels/core/huge_pages.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace sok_lite {
namespace {

constexpr uintptr_t kHugePage = uintptr_t{2} << 20;

bool Enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("SOK_LITE_HUGE_PAGES");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }();
  return enabled;
}

}  // namespace

bool AdviseHugePages(const void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes < kHugePageMinBytes || p == nullptr || !Enabled()) return false;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHugePage - 1);
  if (end <= begin) return false;
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
