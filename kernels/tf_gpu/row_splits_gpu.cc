// GPU registration of SokLiteRowSplitsFromRowIds (op in kernels/tf/lookup_ops.cc). Its inputs and
// output live in host memory: the row ids of a SparseTensor are scanned once, in order, to check
// row-major order, and the splits are small; TF copies them across as needed. The scan is the
// CPU kernel's (kernels/core/validate.cc), so both devices accept and reject the same inputs.
#include <string>

#include "kernels/core/validate.h"
#include "kernels/tf/input_checks.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;

class RowSplitsFromRowIdsHostOp : public OpKernel {
 public:
  explicit RowSplitsFromRowIdsHostOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& row_ids = ctx->input(0);
    int64_t nrows = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 1, &nrows));
    OP_REQUIRES(ctx, nrows >= 0 && nrows < (int64_t{1} << 48),
                errors::InvalidArgument(name_, ": batch size ", nrows, " is out of range"));
    Tensor* splits = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({nrows + 1}), &splits));
    const std::string problem =
        RowSplitsFromRowIds(row_ids.flat<int64_t>().data(), row_ids.NumElements(), nrows,
                            splits->flat<int64_t>().data());
    OP_REQUIRES(ctx, problem.empty(), errors::InvalidArgument(name_, ": sp_ids ", problem));
  }

 private:
  std::string name_;
};

REGISTER_KERNEL_BUILDER(Name("SokLiteRowSplitsFromRowIds")
                            .Device(::tensorflow::DEVICE_GPU)
                            .HostMemory("row_ids")
                            .HostMemory("nrows")
                            .HostMemory("row_splits"),
                        RowSplitsFromRowIdsHostOp);

}  // namespace sok_lite
