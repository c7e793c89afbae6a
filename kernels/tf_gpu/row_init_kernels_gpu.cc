// GPU functor and kernel registration of SokLiteInitRows (kernel class in
// kernels/tf/row_init_kernels.h), float32 only: the same counter-based values as the CPU for every
// id.
#include <cstdint>

#include "kernels/core/row_init.h"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/row_init_kernels.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

template <>
absl::Status InitRowsFunctor<GPUDevice, float>::Compute(tensorflow::OpKernelContext* ctx,
                                                        const RowInit& init, const int64_t* ids,
                                                        int64_t n, int64_t dim, float* out) {
  // SokLiteCudaInitKind has InitKind's order.
  const SokLiteCudaRowInit cuda_init = {static_cast<int>(init.kind), init.seed, init.a, init.b};
  return CudaStatus(sok_lite_cuda_init_rows(&cuda_init, ids, n, dim, out, OpStream(ctx)),
                    "init_rows");
}

REGISTER_KERNEL_BUILDER(
    Name("SokLiteInitRows").Device(::tensorflow::DEVICE_GPU).TypeConstraint<float>("dtype"),
    InitRowsOp<GPUDevice, float>);

}  // namespace sok_lite
