// GPU kernel of the row initializer (op registered in kernels/tf/init_ops.cc), float32 only:
// the same counter-based values as the CPU kernel for every id.
#include <string>

#include "kernels/core/row_init.h"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/input_checks.h"
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
    std::string kind;
    int64_t seed = 0;
    float a = 0, b = 1;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dim", &dim_));
    OP_REQUIRES(ctx, dim_ <= (int64_t{1} << 24),
                errors::InvalidArgument("row width ", dim_, " is out of range"));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("kind", &kind));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("seed", &seed));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("a", &a));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("b", &b));
    InitKind parsed;
    OP_REQUIRES(ctx, ParseInitKind(kind, &parsed),
                errors::InvalidArgument("unknown initializer kind '", kind, "'"));
    // SokLiteCudaInitKind has InitKind's order; a and b as float attributes, like the CPU.
    init_ = {static_cast<int>(parsed), static_cast<uint64_t>(seed), a, b};
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
