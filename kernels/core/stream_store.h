// Non-temporal (cache-bypassing) row stores for outputs far larger than the last-level cache:
// a plain store first reads each destination line into the cache, a streaming store does not,
// which nearly halves the memory traffic of writing such an output.
#ifndef SOK_LITE_KERNELS_CORE_STREAM_STORE_H_
#define SOK_LITE_KERNELS_CORE_STREAM_STORE_H_

#include <cstdint>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace sok_lite {

// Outputs at least this large are written with streaming stores.
constexpr int64_t kStreamOutputBytes = int64_t{32} << 20;

// dst[0, dim) = src[0, dim), the aligned middle with streaming stores where the CPU has them.
template <typename T>
inline void StreamRow(const T* src, int64_t dim, T* dst) {
  int64_t d = 0;
#if defined(__SSE2__)
  constexpr int64_t kLanes = 16 / sizeof(T);
  while (d < dim && reinterpret_cast<uintptr_t>(dst + d) % 16 != 0) {
    dst[d] = src[d];
    ++d;
  }
  for (; d + kLanes <= dim; d += kLanes) {
    if constexpr (sizeof(T) == 4) {
      _mm_stream_ps(reinterpret_cast<float*>(dst + d),
                    _mm_loadu_ps(reinterpret_cast<const float*>(src + d)));
    } else {
      _mm_stream_pd(reinterpret_cast<double*>(dst + d),
                    _mm_loadu_pd(reinterpret_cast<const double*>(src + d)));
    }
  }
#endif
  for (; d < dim; ++d) dst[d] = src[d];
}

// Orders this thread's streaming stores before what follows (they are weakly ordered).
inline void StreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CORE_STREAM_STORE_H_
