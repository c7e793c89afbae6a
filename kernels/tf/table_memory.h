// How a kernel prepares a large table's memory before it reads or updates rows at random:
// huge pages on the host (kernels/core/huge_pages.h); nothing for device memory.
#ifndef SOK_LITE_KERNELS_TF_TABLE_MEMORY_H_
#define SOK_LITE_KERNELS_TF_TABLE_MEMORY_H_

#include "kernels/core/huge_pages.h"
#include "kernels/tf/device.h"
#include "tensorflow/core/framework/tensor.h"

namespace sok_lite {

template <typename Device>
struct TableMemory {
  static void PrepareRandomRows(const tensorflow::Tensor&) {}
};

template <>
struct TableMemory<CPUDevice> {
  static void PrepareRandomRows(const tensorflow::Tensor& table) {
    AdviseHugePages(table.data(), table.TotalBytes());
  }
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_TABLE_MEMORY_H_
