// CPU kernel of SokLiteAssignTable (op in table_assign_ops.cc): the value is copied over TF's CPU
// workers into a fresh buffer advised for huge pages, which then replaces the variable's.
#include "kernels/tf/table_assign_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/core/huge_pages.h"
#include "kernels/tf/cpu_parallel.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"

namespace sok_lite {

void CopyIntoNewTableBuffer(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& from,
                            tensorflow::Tensor* to) {
  const size_t bytes = from.TotalBytes();
  if (bytes == 0) return;
  const char* src = static_cast<const char*>(from.data());
  char* dst = static_cast<char*>(to->data());
  AdviseHugePagesBeforeFirstWrite(dst, bytes);
  constexpr int64_t kBlock = int64_t{1} << 16;
  const int64_t blocks = static_cast<int64_t>((bytes + kBlock - 1) / kBlock);
  ParallelFor(ctx, blocks, kBlock, [&](int64_t b0, int64_t b1) {
    const size_t begin = static_cast<size_t>(b0 * kBlock);
    const size_t end = std::min(bytes, static_cast<size_t>(b1 * kBlock));
    std::memcpy(dst + begin, src + begin, end - begin);
  });
}

namespace {

class AssignTableOp : public tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(tensorflow::OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<tensorflow::Var> var;
    OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, 0), &var));
    const tensorflow::Tensor& value = ctx->input(1);
    tensorflow::Tensor copy;
    {
      // Checked under the lock, copied outside it: nothing else changes the variable's buffer
      // between the check and the swap but another whole assign, which would win either way.
      tensorflow::tf_shared_lock lock(*var->mu());
      OP_REQUIRES(ctx, var->is_initialized && var->tensor()->dtype() == value.dtype(),
                  absl::InvalidArgumentError("assign to an uninitialized table or one of another "
                                             "dtype"));
      OP_REQUIRES(ctx, var->tensor()->shape() == value.shape(),
                  absl::InvalidArgumentError(
                      absl::StrCat("assign of shape ", value.shape().DebugString(),
                                   " to a table of shape ", var->tensor()->shape().DebugString())));
    }
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(value.dtype(), value.shape(), &copy));
    CopyIntoNewTableBuffer(ctx, value, &copy);
    tensorflow::mutex_lock lock(*var->mu());
    *var->tensor() = copy;
  }
};

REGISTER_KERNEL_BUILDER(Name("SokLiteAssignTable").Device(::tensorflow::DEVICE_CPU), AssignTableOp);

}  // namespace
}  // namespace sok_lite
