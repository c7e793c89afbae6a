// GPU kernel of SokLiteDynamicApply (op registered in kernels/tf/dynamic_ops.cc): a row-wise
// optimizer step on the stored rows of a device hash table and on their in-table slots. Same
// steps as the CPU kernel: the first optimizer lays out the slots, gradients of repeated keys
// are summed, every stored row is updated once, keys without a row are skipped, and updated
// rows record the step. Nothing is copied back to the host.
#include <string>
#include <vector>

#include "kernels/core/optimizers.h"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/optimizer_args.h"
#include "kernels/tf_gpu/dynamic_table_gpu.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "tensorflow/core/framework/op_kernel.h"

namespace sok_lite {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
namespace errors = ::tensorflow::errors;

class DynamicApplyGpuOp : public OpKernel {
 public:
  explicit DynamicApplyGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadOptimizerKind(ctx, &kind_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("slot_init", &slot_init_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableGpuResource> t;
    OP_REQUIRES_OK(ctx, LookupDeviceTable(ctx, 0, &t));
    const Tensor& keys = ctx->input(1);
    const Tensor& grads = ctx->input(2);
    int64_t step = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 4, &step));  // host memory
    const std::string label = DynamicTableLabel(name_);
    OptimizerHyper hyper;  // hyper: host memory
    OP_REQUIRES_OK(ctx, ReadOptimizerHyper(ctx->input(3), kind_,
                                           static_cast<int>(slot_init_.size()), label, &hyper));
    const int64_t n = keys.NumElements();
    tensorflow::mutex_lock lock(t->mu);
    const int64_t dim = t->dim();
    OP_REQUIRES(ctx, grads.dims() == 2 && grads.dim_size(0) == n && grads.dim_size(1) == dim,
                errors::InvalidArgument(label, ": gradient shape ", grads.shape().DebugString(),
                                        " does not match ", n, " keys of dim ", dim));
    const std::vector<float> init(slot_init_.begin(), slot_init_.end());
    if (t->num_slots() == 0 && !init.empty()) OP_REQUIRES_OK(ctx, t->AddSlots(ctx, init));
    OP_REQUIRES(ctx, t->num_slots() == static_cast<int>(slot_init_.size()),
                errors::InvalidArgument(label, " holds ", t->num_slots(),
                                        " optimizer slots; this optimizer needs ",
                                        slot_init_.size(), " (one optimizer per table)"));
    // Slots restored from a checkpoint were laid out before the optimizer was known.
    t->SetSlotInit(init);
    if (n == 0) return;
    OP_REQUIRES(ctx, n < (int64_t{1} << 31),
                errors::InvalidArgument(label, ": more than 2^31 keys in one step"));
    cudaStream_t stream = OpStream(ctx);
    const SokLiteCudaTable& table = t->table();

    // Slot of every key (-1: no stored row), then the distinct slots. Entries past the distinct
    // count stay -1, so the update and the step marks can run over all n without knowing it.
    Tensor slots_t, distinct_t, inverse_t, count_t, workspace_t, summed_t;
    int64_t *slots = nullptr, *distinct = nullptr, *count = nullptr;
    int32_t* inverse = nullptr;
    uint8_t* workspace = nullptr;
    float* summed = nullptr;
    size_t bytes = 0;
    OP_REQUIRES_OK(ctx, DeviceTemp<int64_t>(ctx, n, &slots_t, &slots));
    OP_REQUIRES_OK(ctx, DeviceTemp<int64_t>(ctx, n, &distinct_t, &distinct));
    OP_REQUIRES_OK(ctx, DeviceTemp<int32_t>(ctx, n, &inverse_t, &inverse));
    OP_REQUIRES_OK(ctx, DeviceTemp<int64_t>(ctx, 1, &count_t, &count));
    OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_unique_workspace_size(n, &bytes), "unique"));
    OP_REQUIRES_OK(ctx, DeviceTemp<uint8_t>(ctx, bytes, &workspace_t, &workspace));
    OP_REQUIRES_OK(ctx, DeviceTemp<float>(ctx, n * dim, &summed_t, &summed));
    OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_table_find(&table, keys.flat<int64_t>().data(), n,
                                                            slots, nullptr, stream),
                                   "table_find"));
    OP_REQUIRES_OK(ctx, CudaStatus(cudaMemsetAsync(distinct, 0xff, n * sizeof(int64_t), stream),
                                   "fill distinct slots"));
    OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_unique_ids(slots, n, distinct, inverse, nullptr,
                                                            count, workspace, bytes, stream),
                                   "unique_ids"));
    // Sum the gradients of repeated keys: every stored row is then updated exactly once.
    OP_REQUIRES_OK(ctx, CudaStatus(cudaMemsetAsync(summed, 0, n * dim * sizeof(float), stream),
                                   "zero gradients"));
    OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_scatter_add_rows(grads.flat<float>().data(), dim,
                                                                  inverse, n, summed, stream),
                                   "scatter_add_rows"));
    std::vector<float*> slot_rows(table.slots, table.slots + table.num_slots);
    OP_REQUIRES_OK(
        ctx, CudaStatus(sok_lite_cuda_apply_rows(
                            static_cast<int>(kind_), hyper.lr, hyper.weight_decay, hyper.p.data(),
                            static_cast<int>(hyper.p.size()), dim, distinct, summed, n,
                            table.values, slot_rows.data(), table.num_slots, stream),
                        "apply_rows"));
    OP_REQUIRES_OK(ctx,
                   CudaStatus(sok_lite_cuda_table_mark_updated(&table, distinct, n, step, stream),
                              "table_mark_updated"));
  }

 private:
  OptimizerKind kind_;
  std::vector<float> slot_init_;
  std::string name_;
};

REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicApply")
                            .Device(::tensorflow::DEVICE_GPU)
                            .HostMemory("hyper")
                            .HostMemory("step"),
                        DynamicApplyGpuOp);

}  // namespace sok_lite
