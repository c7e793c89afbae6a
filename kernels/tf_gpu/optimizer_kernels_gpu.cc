// GPU kernel of the row-wise optimizers (op registered in kernels/tf/optimizer_ops.cc), float32
// only. Same steps as the CPU kernel: deduplicate the indices, sum the gradients of repeated
// rows, check the rows under the variables' exclusive locks, then update in place.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/optimizers.h"
#include "kernels/cuda/sok_lite_cuda.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/optimizer_args.h"
#include "kernels/tf/table_util.h"
#include "kernels/tf_gpu/gpu_util.h"
#include "kernels/tf_gpu/ragged_checks.h"
#include "kernels/tf_gpu/segment_checks.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"

namespace sok_lite {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::Var;
namespace errors = ::tensorflow::errors;

namespace {

// As the CPU kernel (and TF's sparse updates): copy-on-read mode, and a private copy of the
// buffer while a reader still shares it. The caller holds the variable's lock exclusively.
absl::Status PrepareInPlaceUpdateOnDevice(OpKernelContext* ctx, Var* var) {
  var->copy_on_read_mode.store(true);
  Tensor* t = var->tensor();
  if (t->RefCountIsOne()) return absl::OkStatus();
  Tensor copy;
  TF_RETURN_IF_ERROR(ctx->allocate_temp(t->dtype(), t->shape(), &copy));
  if (t->TotalBytes() > 0) {
    TF_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(copy.data(), t->data(), t->TotalBytes(),
                                                  cudaMemcpyDeviceToDevice, OpStream(ctx)),
                                  "variable copy"));
  }
  *t = copy;
  return absl::OkStatus();
}

}  // namespace

class SparseApplyGpuOp : public OpKernel {
 public:
  explicit SparseApplyGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadOptimizerKind(ctx, &kind_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("var_name", &name_));
  }

  void Compute(OpKernelContext* ctx) override {
    const int num_slots = num_inputs() - 4;
    const Tensor& indices = ctx->input(num_slots + 1);
    const Tensor& grads = ctx->input(num_slots + 2);
    const Tensor& hyper_t = ctx->input(num_slots + 3);  // host memory
    const std::string label = "variable '" + name_ + "'";
    OptimizerHyper hyper;
    OP_REQUIRES_OK(ctx, ReadOptimizerHyper(hyper_t, kind_, num_slots, label, &hyper));
    OP_REQUIRES_OK(ctx, RankInput(ctx, num_slots + 2, 2));
    const int64_t n = indices.NumElements();
    const int64_t dim = grads.dim_size(1);
    OP_REQUIRES(ctx, grads.dim_size(0) == n,
                errors::InvalidArgument(label, ": ", grads.dim_size(0), " gradient rows for ", n,
                                        " indices"));
    OP_REQUIRES(ctx, n < (int64_t{1} << 31),
                errors::InvalidArgument(label, ": more than 2^31 indices"));
    cudaStream_t stream = OpStream(ctx);

    // Distinct rows in first-occurrence order (as the CPU); their count comes back with the
    // range check below: results = [kRaggedChecks check values, num_unique].
    Tensor results_t, rows_t, inverse_t, workspace_t;
    uint64_t* results = nullptr;
    int64_t* rows = nullptr;
    int32_t* inverse = nullptr;
    uint8_t* workspace = nullptr;
    size_t bytes = 0;
    OP_REQUIRES_OK(ctx, DeviceTemp<uint64_t>(ctx, kRaggedChecks + 1, &results_t, &results));
    OP_REQUIRES_OK(ctx, DeviceTemp<int64_t>(ctx, n, &rows_t, &rows));
    OP_REQUIRES_OK(ctx, DeviceTemp<int32_t>(ctx, n, &inverse_t, &inverse));
    OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_unique_workspace_size(n, &bytes), "unique"));
    OP_REQUIRES_OK(ctx, DeviceTemp<uint8_t>(ctx, bytes, &workspace_t, &workspace));
    const int64_t* idx = indices.flat<int64_t>().data();
    OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_unique_ids(
                                       idx, n, rows, inverse, nullptr,
                                       reinterpret_cast<int64_t*>(results + kRaggedChecks),
                                       workspace, bytes, stream),
                                   "unique_ids"));

    std::vector<tensorflow::core::RefCountPtr<Var>> vars(num_slots + 1);
    for (int i = 0; i <= num_slots; ++i) {
      OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, i), &vars[i]));
    }
    // Lock every variable exclusively, in address order so that concurrent steps cannot deadlock.
    std::vector<Var*> order;
    for (auto& v : vars) order.push_back(v.get());
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end()), order.end());
    std::vector<std::unique_ptr<tensorflow::mutex_lock>> locks;
    for (Var* v : order) locks.push_back(std::make_unique<tensorflow::mutex_lock>(*v->mu()));

    OP_REQUIRES_OK(ctx, CheckTable<float>(vars[0].get(), label));
    const TensorShape shape = vars[0]->tensor()->shape();
    OP_REQUIRES(ctx, shape.dim_size(1) == dim,
                errors::InvalidArgument(label, ": gradient rows have ", dim, " columns, the ",
                                        "variable ", shape.dim_size(1)));
    for (int i = 1; i <= num_slots; ++i) {
      OP_REQUIRES_OK(ctx,
                     CheckTable<float>(vars[i].get(), label + " slot " + std::to_string(i - 1)));
      OP_REQUIRES(ctx, vars[i]->tensor()->shape() == shape,
                  errors::InvalidArgument(label, ": slot ", i - 1, " has shape ",
                                          vars[i]->tensor()->shape().DebugString()));
    }
    // The indices as one sample, so check_ragged checks their range; one wait for it and u.
    const int64_t num_rows = shape.dim_size(0);
    Tensor splits_t;
    int64_t* splits = nullptr;
    OP_REQUIRES_OK(ctx, CopyToDevice<int64_t>(ctx, {0, n}, &splits_t, &splits));
    OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_check_ragged(splits, 1, n, idx, num_rows, 0,
                                                              nullptr, 0, results, stream),
                                   "check_ragged"));
    std::vector<uint64_t> host;
    OP_REQUIRES_OK(ctx, CopyToHostAndWait(ctx, results, kRaggedChecks + 1, &host));
    if (host[2] != ~uint64_t{0}) {
      // The first bad position holds the first bad distinct row, the one the CPU reports.
      int64_t r = 0;
      OP_REQUIRES_OK(ctx, ValueAt(ctx, idx + host[2], &r));
      ctx->CtxFailure(errors::InvalidArgument(label, ": gradient row ", r, " is out of range [0, ",
                                              num_rows, ")"));
      return;
    }
    const int64_t u = static_cast<int64_t>(host[kRaggedChecks]);
    for (Var* v : order) OP_REQUIRES_OK(ctx, PrepareInPlaceUpdateOnDevice(ctx, v));
    if (u == 0 || dim == 0) return;

    // Sum the gradients of repeated rows: every row is then updated exactly once.
    const float* g = grads.flat<float>().data();
    Tensor summed_t;
    if (u < n) {
      float* summed = nullptr;
      OP_REQUIRES_OK(ctx, DeviceTemp<float>(ctx, u * dim, &summed_t, &summed));
      OP_REQUIRES_OK(ctx, CudaStatus(cudaMemsetAsync(summed, 0, u * dim * sizeof(float), stream),
                                     "zero gradients"));
      OP_REQUIRES_OK(ctx,
                     CudaStatus(sok_lite_cuda_scatter_add_rows(g, dim, inverse, n, summed, stream),
                                "scatter_add_rows"));
      g = summed;
    }
    std::vector<float*> slots;
    for (int i = 1; i <= num_slots; ++i) slots.push_back(vars[i]->tensor()->flat<float>().data());
    OP_REQUIRES_OK(ctx, CudaStatus(sok_lite_cuda_apply_rows(
                                       static_cast<int>(kind_), hyper.lr, hyper.weight_decay,
                                       hyper.p.data(), static_cast<int>(hyper.p.size()), dim, rows,
                                       g, u, vars[0]->tensor()->flat<float>().data(), slots.data(),
                                       num_slots, stream),
                                   "apply_rows"));
  }

 private:
  OptimizerKind kind_;
  std::string name_;
};

REGISTER_KERNEL_BUILDER(Name("SokLiteSparseApply")
                            .Device(::tensorflow::DEVICE_GPU)
                            .HostMemory("hyper")
                            .TypeConstraint<float>("dtype"),
                        SparseApplyGpuOp);

}  // namespace sok_lite
