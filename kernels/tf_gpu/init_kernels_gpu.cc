// GPU kernel of the row initializer (op registered in kernels/tf/init_ops.cc), float32 only:
// the same counter-based values as the CPU kernel for every id.
#include <string>

#include "kernels/core/row_init.h"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/kernel_args.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;

class InitRowsGpuOp : public OpKernel {
 public:
  explicit InitRowsGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    RowInit init;
    OP_REQUIRES_OK(ctx, ReadRowWidth(ctx, int64_t{1} << 24, &dim_));
    OP_REQUIRES_OK(ctx, ReadRowInit(ctx, "kind", "a", "b", &init));
    // SokLiteCudaInitKind has InitKind's order.
    init_ = {static_cast<int>(init.kind), init.seed, init.a, init.b};
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& ids = ctx->input(0);
    const int64_t n = ids.NumElements();
    TensorShape shape;
    OP_REQUIRES_OK(ctx, SafeShape({n, dim_}, &shape));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    OP_REQUIRES_OK(ctx,
                   CudaStatus(sok_lite_cuda_init_rows(&init_, ids.flat<int64_t>().data(), n, dim_,
                                                      out->flat<float>().data(), OpStream(ctx)),
                              "init_rows"));
  }

 private:
  int64_t dim_ = 0;
  SokLiteCudaRowInit init_ = {};
};

REGISTER_KERNEL_BUILDER(
    Name("SokLiteInitRows").Device(::tensorflow::DEVICE_GPU).TypeConstraint<float>("dtype"),
    InitRowsGpuOp);

}  // namespace sok_lite
