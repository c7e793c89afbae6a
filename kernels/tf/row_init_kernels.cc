// CPU functor and kernel registration of SokLiteInitRows (kernel class in row_init_kernels.h): the
// rows come from kernels/core/row_init, split over TF's CPU workers.
#include "kernels/tf/row_init_kernels.h"

#include <cstdint>

#include "kernels/core/huge_pages.h"
#include "kernels/core/row_init.h"
#include "kernels/tf/cpu_parallel.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

template <typename T>
struct InitRowsFunctor<CPUDevice, T> {
  static absl::Status Compute(tensorflow::OpKernelContext* ctx, const RowInit& init,
                              const int64_t* ids, int64_t n, int64_t dim, T* out) {
    // A table (or slot) variable adopts this buffer: advised before it is written, its rows are
    // faulted in as huge pages.
    AdviseHugePagesBeforeFirstWrite(out, static_cast<size_t>(n * dim) * sizeof(T));
    ParallelFor(ctx, n, 40 * dim + 1,
                [&](int64_t i0, int64_t i1) { InitRows(init, ids, dim, i0, i1, out); });
    return absl::OkStatus();
  }
};

REGISTER_KERNEL_BUILDER(
    Name("SokLiteInitRows").Device(::tensorflow::DEVICE_CPU).TypeConstraint<float>("dtype"),
    InitRowsOp<CPUDevice, float>);
REGISTER_KERNEL_BUILDER(
    Name("SokLiteInitRows").Device(::tensorflow::DEVICE_CPU).TypeConstraint<double>("dtype"),
    InitRowsOp<CPUDevice, double>);

}  // namespace sok_lite
