// GPU kernel of SokLiteDynamicExport (op registered in kernels/tf/dynamic_ops.cc): the stored
// keys of a device hash table and their rows in the CPU layout (value, then each slot with
// with_slots), optionally only the rows changed after since_step. One wait, for the row count.
#include <climits>
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
using ::tensorflow::TensorShape;

class DynamicExportGpuOp : public OpKernel {
 public:
  explicit DynamicExportGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_slots", &with_slots_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableGpuResource> t;
    OP_REQUIRES_OK(ctx, LookupDeviceTable(ctx, 0, &t));
    int64_t since = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 1, &since));  // host memory
    tensorflow::tf_shared_lock lock(t->mu);
    const SokLiteCudaTable& table = t->table();
    cudaStream_t stream = OpStream(ctx);
    const int64_t width = with_slots_ ? t->stride() : t->dim();
    Tensor count_t;
    int64_t* count = nullptr;
    OP_REQUIRES_OK(ctx, DeviceTemp<int64_t>(ctx, 1, &count_t, &count));
    if (since == INT64_MIN) {  // every row: the size the table already keeps
      OP_REQUIRES_OK(ctx, CudaStatus(cudaMemcpyAsync(count, table.size, sizeof(int64_t),
                                                     cudaMemcpyDeviceToDevice, stream),
                                     "size copy"));
    } else {
      OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_table_count_since(&table, since, count, stream),
                                     "table_count_since"));
    }
    std::vector<int64_t> host;
    OP_REQUIRES_OK(ctx, CopyToHostAndWait(ctx, count, 1, &host));
    const int64_t n = host[0];
    Tensor *keys, *values;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &keys));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({n, width}), &values));
    if (n == 0) return;
    OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_table_export_rows(
                                       &table, since, with_slots_, n, keys->flat<int64_t>().data(),
                                       values->flat<float>().data(), count, stream),
                                   "table_export_rows"));
  }

 private:
  bool with_slots_ = false;
};

REGISTER_KERNEL_BUILDER(
    Name("SokLiteDynamicExport").Device(::tensorflow::DEVICE_GPU).HostMemory("since_step"),
    DynamicExportGpuOp);

}  // namespace sok_lite
