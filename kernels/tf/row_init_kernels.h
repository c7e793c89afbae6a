// The one kernel class of SokLiteInitRows (op in row_init_ops.cc), shared by the CPU and GPU op
// libraries; only the row values are computed per device, by InitRowsFunctor<Device, T>, which
// row_init_kernels.cc defines for CPUDevice and kernels/tf_gpu/row_init_kernels_gpu.cc for
// GPUDevice.
#ifndef SOK_LITE_KERNELS_TF_ROW_INIT_KERNELS_H_
#define SOK_LITE_KERNELS_TF_ROW_INIT_KERNELS_H_

#include <cstdint>

#include "kernels/core/row_init.h"
#include "kernels/tf/device.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/kernel_args.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

// out[i, :] = the initial row of ids[i] for i in [0, n); out is [n, dim] on the device.
template <typename Device, typename T>
struct InitRowsFunctor {
  static absl::Status Compute(tensorflow::OpKernelContext* ctx, const RowInit& init,
                              const int64_t* ids, int64_t n, int64_t dim, T* out);
};

template <typename Device, typename T>
class InitRowsOp : public tensorflow::OpKernel {
 public:
  explicit InitRowsOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadRowWidth(ctx, int64_t{1} << 24, &dim_));
    OP_REQUIRES_OK(ctx, ReadRowInit(ctx, "kind", "a", "b", &init_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& ids = ctx->input(0);
    const int64_t n = ids.NumElements();
    tensorflow::TensorShape shape;
    OP_REQUIRES_OK(ctx, SafeShape({n, dim_}, &shape));
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    OP_REQUIRES_OK(ctx, InitRowsFunctor<Device, T>::Compute(ctx, init_, ids.flat<int64_t>().data(),
                                                            n, dim_, out->flat<T>().data()));
  }

 private:
  int64_t dim_ = 0;
  RowInit init_;
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_ROW_INIT_KERNELS_H_
