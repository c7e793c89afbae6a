// The row initializer op: deterministic initial rows from (seed, row id), see core/row_init.h.
#include "kernels/core/row_init.h"
#include "kernels/tf/cpu_parallel.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/kernel_args.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace sok_lite {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;
namespace errors = ::tensorflow::errors;

namespace {

absl::Status InitRowsShape(InferenceContext* c) {
  ShapeHandle ids;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &ids));
  int64_t dim = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("dim", &dim));
  c->set_output(0, c->Matrix(c->Dim(ids, 0), dim));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("SokLiteInitRows")
    .Input("row_ids: int64")
    .Output("rows: dtype")
    .Attr("dtype: {float, double}")
    .Attr("dim: int >= 0")
    .Attr("kind: string")
    .Attr("seed: int")
    .Attr("a: float = 0.0")
    .Attr("b: float = 1.0")
    .SetShapeFn(InitRowsShape)
    .Doc(R"doc(
Initial rows for row ids (global row ids or hash keys), a pure function of (seed, id, column).

kind: "random_normal" (a = mean, b = stddev), "truncated_normal" (the same, redrawn beyond 2
  stddev), "random_uniform" (a = minval, b = maxval) or "constant" (a = value).
)doc");

template <typename T>
class InitRowsOp : public OpKernel {
 public:
  explicit InitRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadRowWidth(ctx, int64_t{1} << 24, &dim_));
    OP_REQUIRES_OK(ctx, ReadRowInit(ctx, "kind", "a", "b", &init_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& ids = ctx->input(0);
    const int64_t n = ids.NumElements();
    TensorShape shape;
    OP_REQUIRES_OK(ctx, SafeShape({n, dim_}, &shape));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    const int64_t* id = ids.flat<int64_t>().data();
    T* dst = out->flat<T>().data();
    ParallelFor(ctx, n, 40 * dim_ + 1,
                [&](int64_t i0, int64_t i1) { InitRows(init_, id, dim_, i0, i1, dst); });
  }

 private:
  int64_t dim_ = 0;
  RowInit init_;
};

REGISTER_KERNEL_BUILDER(
    Name("SokLiteInitRows").Device(::tensorflow::DEVICE_CPU).TypeConstraint<float>("dtype"),
    InitRowsOp<float>);
REGISTER_KERNEL_BUILDER(
    Name("SokLiteInitRows").Device(::tensorflow::DEVICE_CPU).TypeConstraint<double>("dtype"),
    InitRowsOp<double>);

}  // namespace sok_lite
