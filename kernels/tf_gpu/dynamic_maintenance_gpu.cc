// GPU kernels of the dynamic-table maintenance ops (registered in kernels/tf/dynamic_ops.cc):
// SokLiteDynamicSize (copied on the device, no wait), SokLiteDynamicEvict (a rebuild without
// the rows unseen for the last steps) and SokLiteDynamicClear.
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf_gpu/dynamic_table_gpu.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

using ::tensorflow::DEVICE_GPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;

class DynamicSizeGpuOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableGpuResource> t;
    OP_REQUIRES_OK(ctx, LookupDeviceTable(ctx, 0, &t));
    tensorflow::tf_shared_lock lock(t->mu);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    OP_REQUIRES_OK(
        ctx, CudaStatus(cudaMemcpyAsync(out->flat<int64_t>().data(), t->table().size,
                                        sizeof(int64_t), cudaMemcpyDeviceToDevice, OpStream(ctx)),
                        "size copy"));
  }
};

class DynamicEvictGpuOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableGpuResource> t;
    OP_REQUIRES_OK(ctx, LookupDeviceTable(ctx, 0, &t));
    int64_t steps = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 1, &steps));  // host memory
    OP_REQUIRES(ctx, steps >= 1, errors::InvalidArgument("steps_unseen must be >= 1"));
    tensorflow::mutex_lock lock(t->mu);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));  // host memory
    // The CPU removes rows with step - last_seen >= steps, so the kept ones have
    // last_seen >= step - steps + 1 (steps >= 1: no overflow).
    int64_t evicted = 0;
    OP_REQUIRES_OK(ctx, t->Evict(ctx, t->step() - steps + 1, &evicted));
    out->scalar<int64_t>()() = evicted;
  }
};

class DynamicClearGpuOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableGpuResource> t;
    OP_REQUIRES_OK(ctx, LookupDeviceTable(ctx, 0, &t));
    tensorflow::mutex_lock lock(t->mu);
    OP_REQUIRES_OK(ctx, t->Clear(ctx));
  }
};

REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicSize").Device(DEVICE_GPU), DynamicSizeGpuOp);
REGISTER_KERNEL_BUILDER(
    Name("SokLiteDynamicEvict").Device(DEVICE_GPU).HostMemory("steps_unseen").HostMemory("evicted"),
    DynamicEvictGpuOp);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicClear").Device(DEVICE_GPU), DynamicClearGpuOp);

}  // namespace sok_lite
