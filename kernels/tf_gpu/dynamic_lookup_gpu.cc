// GPU kernel of SokLiteDynamicLookup (op registered in kernels/tf/dynamic_ops.cc): one lookup
// step of a device hash table, finding or creating the rows of `keys` (lazy init with the CPU's
// initializer) and returning them in key order.
#include <string>

#include "kernels/tf/input_checks.h"
#include "kernels/tf_gpu/dynamic_table_gpu.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;

class DynamicLookupGpuOp : public OpKernel {
 public:
  explicit DynamicLookupGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dim", &dim_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableGpuResource> t;
    OP_REQUIRES_OK(ctx, LookupDeviceTable(ctx, 0, &t));
    const Tensor& keys = ctx->input(1);
    const int64_t n = keys.NumElements();
    tensorflow::mutex_lock lock(t->mu);
    const int64_t dim = t->dim();
    OP_REQUIRES(ctx, dim == dim_,
                errors::InvalidArgument(DynamicTableLabel(name_), ": rows have ", dim,
                                        " columns, the lookup expects ", dim_));
    TensorShape shape;
    OP_REQUIRES_OK(ctx, SafeShape({n, dim}, &shape));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    Tensor slots_t;
    int64_t* slots = nullptr;
    OP_REQUIRES_OK(ctx, DeviceTemp<int64_t>(ctx, n, &slots_t, &slots));
    // Every call is a step, even an empty one, as on the CPU.
    const int64_t step = t->NextStep();
    OP_REQUIRES_OK(ctx, t->FindOrInsert(ctx, keys.flat<int64_t>().data(), n, step, slots,
                                        out->flat<float>().data()));
  }

 private:
  std::string name_;
  int64_t dim_ = 0;
};

REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicLookup").Device(::tensorflow::DEVICE_GPU),
                        DynamicLookupGpuOp);

}  // namespace sok_lite
