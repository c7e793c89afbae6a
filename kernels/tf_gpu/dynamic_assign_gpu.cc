// GPU kernel of SokLiteDynamicAssign (op registered in kernels/tf/dynamic_ops.cc): stores given
// rows (value, or value and slots) for keys of a device hash table, inserting missing keys, and
// records `step` as their last change. Restores lay out slots the table does not have yet, as
// the CPU kernel does.
#include <vector>

#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf_gpu/dynamic_table_gpu.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
namespace errors = ::tensorflow::errors;

class DynamicAssignGpuOp : public OpKernel {
 public:
  explicit DynamicAssignGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_slots", &with_slots_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableGpuResource> t;
    OP_REQUIRES_OK(ctx, LookupDeviceTable(ctx, 0, &t));
    const Tensor& keys = ctx->input(1);
    const Tensor& values = ctx->input(2);
    int64_t step = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 3, &step));  // host memory
    const int64_t n = keys.NumElements();
    tensorflow::mutex_lock lock(t->mu);
    const int64_t dim = t->dim();
    // Slots are laid out only for a well-formed call: a rejected assign changes nothing.
    if (with_slots_ && values.dims() == 2 && values.dim_size(0) == n &&
        values.dim_size(1) > t->stride() && values.dim_size(1) % dim == 0) {
      // Rows carry more slots than the table has yet (a restore before the first optimizer
      // step): lay them out, starting from zero until an optimizer sets their initial values.
      const int64_t extra = (values.dim_size(1) - t->stride()) / dim;
      OP_REQUIRES(
          ctx, t->num_slots() + extra <= kMaxDeviceSlots,
          errors::InvalidArgument("assign: rows with ", t->num_slots() + extra,
                                  " optimizer slots; a GPU table holds at most ", kMaxDeviceSlots));
      OP_REQUIRES_OK(ctx, t->AddSlots(ctx, std::vector<float>(extra, 0.0f)));
    }
    const int64_t width = with_slots_ ? t->stride() : dim;
    OP_REQUIRES(ctx, values.dims() == 2 && values.dim_size(0) == n && values.dim_size(1) == width,
                errors::InvalidArgument("assign: values of shape ", values.shape().DebugString(),
                                        " for ", n, " keys of width ", width));
    if (n == 0) return;
    Tensor slots_t;
    int64_t* slots = nullptr;
    OP_REQUIRES_OK(ctx, DeviceTemp<int64_t>(ctx, n, &slots_t, &slots));
    // Inserted keys get the current lookup step as last seen, as on the CPU; no step passes.
    OP_REQUIRES_OK(ctx,
                   t->FindOrInsert(ctx, keys.flat<int64_t>().data(), n, t->step(), slots, nullptr));
    const SokLiteCudaTable& table = t->table();
    cudaStream_t stream = OpStream(ctx);
    OP_REQUIRES_OK(
        ctx, CudaStatus(sok_lite_cuda_table_store_rows(
                            &table, slots, n, values.flat<float>().data(), with_slots_, stream),
                        "table_store_rows"));
    OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_table_mark_updated(&table, slots, n, step, stream),
                                   "table_mark_updated"));
  }

 private:
  bool with_slots_ = false;
};

REGISTER_KERNEL_BUILDER(
    Name("SokLiteDynamicAssign").Device(::tensorflow::DEVICE_GPU).HostMemory("step"),
    DynamicAssignGpuOp);

}  // namespace sok_lite
