// The integer mixes of kernels/core, callable on host and device. They must stay bit-identical
// to the CPU code: HashOwner decides which rank owns a dynamic-table key, so a GPU rank and a
// CPU rank have to agree. tests/test_cuda_compiles.py compares them with kernels/core on the
// host.
#ifndef SOK_LITE_KERNELS_CUDA_HASHING_CUH_
#define SOK_LITE_KERNELS_CUDA_HASHING_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace sok_lite {
namespace cuda {

// splitmix64 finalizer, as MixBits in kernels/core/unique.cc (no increment).
__host__ __device__ __forceinline__ uint64_t MixBits(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// splitmix64 step (increment, then finalizer), as Mix in kernels/core/row_init.cc and the
// mix of HashOwner in kernels/core/exchange.h.
__host__ __device__ __forceinline__ uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// As sok_lite::HashOwner: the rank owning dynamic-table key `key` among num_ranks.
__host__ __device__ __forceinline__ int64_t HashOwner(int64_t key, int64_t num_ranks) {
  return static_cast<int64_t>(SplitMix(static_cast<uint64_t>(key)) %
                              static_cast<uint64_t>(num_ranks));
}

// Owner codes of sok_lite::Owner: >= 0 localized on that rank, -1 distributed, -2 hashed.
constexpr int64_t kOwnerDistributed = -1;
constexpr int64_t kOwnerHashed = -2;

__host__ __device__ __forceinline__ int64_t OwnerRank(int64_t owner, int64_t id,
                                                      int64_t num_ranks) {
  if (owner == kOwnerDistributed) return id % num_ranks;
  if (owner == kOwnerHashed) return HashOwner(id, num_ranks);
  return owner;
}

__host__ __device__ __forceinline__ int64_t OwnerLocalRow(int64_t owner, int64_t id,
                                                          int64_t num_ranks) {
  return owner == kOwnerDistributed ? id / num_ranks : id;
}

}  // namespace cuda
}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CUDA_HASHING_CUH_
