// Carves one caller-provided device buffer into aligned arrays, so launchers that need scratch
// memory (and CUB's temporary storage) take a single workspace pointer and size. The same
// sequence of Take calls with a null base computes the size the caller must provide.
#ifndef SOK_LITE_KERNELS_CUDA_WORKSPACE_CUH_
#define SOK_LITE_KERNELS_CUDA_WORKSPACE_CUH_

#include <cstddef>
#include <cstdint>

namespace sok_lite {
namespace cuda {

class Workspace {
 public:
  explicit Workspace(void* base = nullptr) : base_(static_cast<char*>(base)) {}

  // The next `count` elements of T, 256-byte aligned (CUB's own alignment).
  template <typename T>
  T* Take(size_t count) {
    used_ = (used_ + 255) / 256 * 256;
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += count * sizeof(T);
    return p;
  }

  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

}  // namespace cuda
}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_CUDA_WORKSPACE_CUH_
