// CPU kernel of the row-wise optimizers; the math lives in kernels/core/optimizers.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/optimizers.h"
#include "kernels/core/unique.h"
#include "kernels/tf/cpu_parallel.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/optimizer_args.h"
#include "kernels/tf/table_util.h"
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

// Makes the variable's buffer safe to update in place (the caller holds its lock exclusively):
// copy-on-read mode, so that dense readers get copies, and a private copy of the buffer if a
// reader still shares it. This is what TF's own sparse update ops do.
absl::Status PrepareInPlaceUpdate(OpKernelContext* ctx, Var* var) {
  var->copy_on_read_mode.store(true);
  Tensor* t = var->tensor();
  if (t->RefCountIsOne()) return absl::OkStatus();
  Tensor copy;
  TF_RETURN_IF_ERROR(ctx->allocate_temp(t->dtype(), t->shape(), &copy));
  std::copy_n(static_cast<const char*>(t->data()), t->TotalBytes(),
              static_cast<char*>(copy.data()));
  *t = copy;
  return absl::OkStatus();
}

}  // namespace

template <typename T>
class SparseApplyOp : public OpKernel {
 public:
  explicit SparseApplyOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadOptimizerKind(ctx, &kind_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("var_name", &name_));
  }

  void Compute(OpKernelContext* ctx) override {
    const int num_slots = num_inputs() - 4;
    const Tensor& indices = ctx->input(num_slots + 1);
    const Tensor& grads = ctx->input(num_slots + 2);
    const Tensor& hyper_t = ctx->input(num_slots + 3);
    const std::string label = "variable '" + name_ + "'";
    OptimizerHyper hyper;
    OP_REQUIRES_OK(ctx, ReadOptimizerHyper(hyper_t, kind_, num_slots, label, &hyper));
    OP_REQUIRES_OK(ctx, RankInput(ctx, num_slots + 2, 2));
    const int64_t n = indices.NumElements();
    const int64_t dim = grads.dim_size(1);
    OP_REQUIRES(ctx, grads.dim_size(0) == n,
                errors::InvalidArgument(label, ": ", grads.dim_size(0), " gradient rows for ", n,
                                        " indices"));

    std::vector<int64_t> rows;
    std::vector<T> summed;
    const T* g = SumRepeatedRows(indices.flat<int64_t>().data(), n, grads.flat<T>().data(), dim,
                                 &rows, &summed);
    const int64_t u = rows.size();

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

    OP_REQUIRES_OK(ctx, CheckTable<T>(vars[0].get(), label));
    const TensorShape shape = vars[0]->tensor()->shape();
    OP_REQUIRES(ctx, shape.dim_size(1) == dim,
                errors::InvalidArgument(label, ": gradient rows have ", dim, " columns, the ",
                                        "variable ", shape.dim_size(1)));
    for (int i = 1; i <= num_slots; ++i) {
      OP_REQUIRES_OK(ctx, CheckTable<T>(vars[i].get(), label + " slot " + std::to_string(i - 1)));
      OP_REQUIRES(ctx, vars[i]->tensor()->shape() == shape,
                  errors::InvalidArgument(label, ": slot ", i - 1, " has shape ",
                                          vars[i]->tensor()->shape().DebugString()));
    }
    for (int64_t r : rows) {
      OP_REQUIRES(ctx, r >= 0 && r < shape.dim_size(0),
                  errors::InvalidArgument(label, ": gradient row ", r, " is out of range [0, ",
                                          shape.dim_size(0), ")"));
    }
    for (Var* v : order) OP_REQUIRES_OK(ctx, PrepareInPlaceUpdate(ctx, v));

    T* w = vars[0]->tensor()->flat<T>().data();
    std::vector<T*> slots;
    for (int i = 1; i <= num_slots; ++i) slots.push_back(vars[i]->tensor()->flat<T>().data());
    ParallelFor(ctx, u, 20 * dim + 10, [&](int64_t i0, int64_t i1) {
      ApplyRows(kind_, hyper, dim, rows.data(), g, i0, i1, w, slots);
    });
  }

 private:
  OptimizerKind kind_;
  std::string name_;
};

REGISTER_KERNEL_BUILDER(
    Name("SokLiteSparseApply").Device(::tensorflow::DEVICE_CPU).TypeConstraint<float>("dtype"),
    SparseApplyOp<float>);
REGISTER_KERNEL_BUILDER(
    Name("SokLiteSparseApply").Device(::tensorflow::DEVICE_CPU).TypeConstraint<double>("dtype"),
    SparseApplyOp<double>);

}  // namespace sok_lite
