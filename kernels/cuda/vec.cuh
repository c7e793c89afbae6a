// W floats loaded / stored as one float4 (W = 4) or one by one (W = 1), so each kernel is
// written once and instantiated for both the vectorized and the scalar path.
#ifndef SOK_LITE_KERNELS_CUDA_VEC_CUH_
#define SOK_LITE_KERNELS_CUDA_VEC_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

namespace sok_lite {
namespace cuda {

template <int W>
struct Vec {
  float v[W];
};

template <int W>
__device__ __forceinline__ Vec<W> Zeros() {
  Vec<W> r;
#pragma unroll
  for (int i = 0; i < W; ++i) r.v[i] = 0.0f;
  return r;
}

template <int W>
__device__ __forceinline__ Vec<W> Load(const float* p) {
  Vec<W> r;
  if constexpr (W == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    r.v[0] = t.x;
    r.v[1] = t.y;
    r.v[2] = t.z;
    r.v[3] = t.w;
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) r.v[i] = p[i];
  }
  return r;
}

template <int W>
__device__ __forceinline__ void Store(float* p, const Vec<W>& x) {
  if constexpr (W == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(x.v[0], x.v[1], x.v[2], x.v[3]);
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) p[i] = x.v[i];
  }
}

// p[i] += x[i], atomically per float (one 16-byte atomic where the hardware has it: sm_90+).
template <int W>
__device__ __forceinline__ void AtomicAdd(float* p, const Vec<W>& x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kVectorAtomic = W == 4;
#else
  constexpr bool kVectorAtomic = false;
#endif
  if constexpr (kVectorAtomic) {
    atomicAdd(reinterpret_cast<float4*>(p), make_float4(x.v[0], x.v[1], x.v[2], x.v[3]));
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) atomicAdd(p + i, x.v[i]);
  }
}

// The float4 path needs whole float4s per row and 16-byte aligned row starts. Null pointers
// (optional inputs) do not count.
inline bool CanUseFloat4(int64_t dim, std::initializer_list<const void*> pointers) {
  if (dim % 4 != 0) return false;
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

}  // namespace cuda
}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CUDA_VEC_CUH_
