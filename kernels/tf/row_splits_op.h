// The kernel of SokLiteRowSplitsFromRowIds, shared by the CPU registration (lookup_kernels.cc)
// and the GPU one (kernels/tf_gpu, where every argument lives in host memory): the same scan of
// a SparseTensor's row ids accepts and rejects the same inputs on both devices.
#ifndef SOK_LITE_KERNELS_TF_ROW_SPLITS_OP_H_
#define SOK_LITE_KERNELS_TF_ROW_SPLITS_OP_H_

#include <string>

#include "kernels/core/validate.h"
#include "kernels/tf/input_checks.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

class RowSplitsFromRowIdsOp : public tensorflow::OpKernel {
 public:
  explicit RowSplitsFromRowIdsOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& row_ids = ctx->input(0);
    int64_t nrows = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 1, &nrows));
    OP_REQUIRES(
        ctx, nrows >= 0 && nrows < (int64_t{1} << 48),
        tensorflow::errors::InvalidArgument(name_, ": batch size ", nrows, " is out of range"));
    tensorflow::Tensor* splits = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({nrows + 1}), &splits));
    const std::string problem =
        RowSplitsFromRowIds(row_ids.flat<int64_t>().data(), row_ids.NumElements(), nrows,
                            splits->flat<int64_t>().data());
    OP_REQUIRES(ctx, problem.empty(),
                tensorflow::errors::InvalidArgument(name_, ": sp_ids ", problem));
  }

 private:
  std::string name_;
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_ROW_SPLITS_OP_H_
