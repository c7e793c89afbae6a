// The one kernel class of SokLiteSparseApply (op in optimizer_ops.cc), shared by the CPU and GPU
// op libraries: attribute reads, input checks, locking and error texts live here once; only the
// row arithmetic differs, through SparseApplyFunctor<Device, T>, which optimizer_kernels.cc
// defines for CPUDevice and kernels/tf_gpu/optimizer_kernels_gpu.cc for GPUDevice.
#ifndef SOK_LITE_KERNELS_TF_OPTIMIZER_KERNELS_H_
#define SOK_LITE_KERNELS_TF_OPTIMIZER_KERNELS_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/core/optimizer.h"
#include "kernels/tf/device.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/optimizer_args.h"
#include "kernels/tf/table_dtype.h"
#include "kernels/tf/table_memory.h"
#include "kernels/tf/table_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"

namespace sok_lite {

// One step's distinct rows on one device, defined per device. The kernel calls, in order:
//   absl::Status Unique(ctx, indices, grads, dim): before the variables are locked, the
//     distinct rows of `indices` in first-occurrence order (and, where the device does it
//     then, their summed gradients);
//   absl::Status FirstBadRow(ctx, num_rows, &bad, &row): under the locks, whether a distinct
//     row is outside [0, num_rows) and the first such row in first-occurrence order;
//   static absl::Status CopyBuffer(ctx, from, &to): copies a variable's buffer on the device;
//   absl::Status Apply(ctx, kind, hyper, dim, var, slots): the update of every distinct row
//     of var and its slots (device pointers), with the gradients of repeated rows summed;
//   absl::Status ApplyHalf(ctx, kind, hyper, dim, var, slots, rounding): the same for a table
//     stored in 16 bits (var: uint16_t bit patterns; T = float);
//   absl::Status ApplyHalfSlots(ctx, kind, hyper, dim, var, bf16_slots, rounding): the same
//     with bfloat16 slots (uint16_t bit patterns), rounded back stochastically beside the row;
//   absl::Status Track(ctx, tracker, step): after one of the Apply calls, tracker[row] = step
//     for every distinct row (int64 device pointer).
// kMaxIndices bounds the number of indices the device's launchers take.
template <typename Device, typename T>
class SparseApplyFunctor;

// Makes the variable's buffer safe to update in place (the caller holds its lock exclusively):
// copy-on-read mode, so that dense readers get copies, and a private copy of the buffer if a
// reader still shares it. This is what TF's own sparse update ops do.
template <typename Functor>
absl::Status PrepareInPlaceUpdate(tensorflow::OpKernelContext* ctx, tensorflow::Var* var) {
  var->copy_on_read_mode.store(true);
  tensorflow::Tensor* t = var->tensor();
  if (t->RefCountIsOne()) return absl::OkStatus();
  tensorflow::Tensor copy;
  TF_RETURN_IF_ERROR(ctx->allocate_temp(t->dtype(), t->shape(), &copy));
  TF_RETURN_IF_ERROR(Functor::CopyBuffer(ctx, *t, &copy));
  *t = copy;
  return absl::OkStatus();
}

template <typename Device, typename T>
class SparseApplyOp : public tensorflow::OpKernel {
  using Functor = SparseApplyFunctor<Device, T>;

 public:
  explicit SparseApplyOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadOptimizerKind(ctx, &kind_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("var_name", &name_));
    int64_t seed = 0;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("rounding_seed", &seed));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("row_stride", &rounding_.row_stride));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("row_offset", &rounding_.row_offset));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_trackers", &num_trackers_));
    OP_REQUIRES(ctx, num_trackers_ <= 1,
                ::tensorflow::errors::InvalidArgument("at most one tracker, not ", num_trackers_));
    rounding_.seed = static_cast<uint64_t>(seed);
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    namespace errors = ::tensorflow::errors;
    using ::tensorflow::Tensor;
    using ::tensorflow::Var;
    const int num_slots = num_inputs() - 5 - num_trackers_;
    const Tensor& indices = ctx->input(num_slots + 1);
    const Tensor& grads = ctx->input(num_slots + 2);
    const Tensor& hyper_t = ctx->input(num_slots + 3);  // host memory on either device
    const std::string label = "variable '" + name_ + "'";
    // The variable and its slots (kind, dtype, shape) before the gradients, even empty ones;
    // checked again under the exclusive locks of the update.
    std::vector<tensorflow::core::RefCountPtr<Var>> vars(num_slots + 1);
    for (int i = 0; i <= num_slots; ++i) {
      OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, i), &vars[i]));
    }
    // The tracker, when given, is locked and prepared with them but checked on its own.
    tensorflow::core::RefCountPtr<Var> tracker;
    if (num_trackers_ == 1) {
      OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, num_slots + 5), &tracker));
    }
    const std::vector<Var*> order = LockOrder(vars, tracker.get());
    bool bf16_slots = false;
    {
      std::vector<std::unique_ptr<tensorflow::tf_shared_lock>> locks;
      for (Var* v : order) locks.push_back(std::make_unique<tensorflow::tf_shared_lock>(*v->mu()));
      OP_REQUIRES_OK(ctx, CheckVars(vars, label, &bf16_slots));
      OP_REQUIRES_OK(ctx, CheckTracker(vars[0].get(), tracker.get(), label));
    }
    OptimizerHyper hyper;
    OP_REQUIRES_OK(ctx, ReadOptimizerHyper(hyper_t, kind_, num_slots, label, &hyper));
    int64_t step = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, num_slots + 4, &step));  // host memory
    OP_REQUIRES_OK(ctx, RankInput(ctx, num_slots + 2, 2));
    const int64_t n = indices.NumElements();
    const int64_t dim = grads.dim_size(1);
    OP_REQUIRES(ctx, grads.dim_size(0) == n,
                errors::InvalidArgument(label, ": ", grads.dim_size(0), " gradient rows for ", n,
                                        " indices"));
    OP_REQUIRES(ctx, n < Functor::kMaxIndices,
                errors::InvalidArgument(label, ": more than 2^31 indices"));
    Functor rows;
    OP_REQUIRES_OK(ctx, rows.Unique(ctx, indices, grads, dim));

    // Lock every variable exclusively, in address order so that concurrent steps cannot deadlock.
    std::vector<std::unique_ptr<tensorflow::mutex_lock>> locks;
    for (Var* v : order) locks.push_back(std::make_unique<tensorflow::mutex_lock>(*v->mu()));
    OP_REQUIRES_OK(ctx, CheckVars(vars, label, &bf16_slots));
    OP_REQUIRES_OK(ctx, CheckTracker(vars[0].get(), tracker.get(), label));
    const tensorflow::TensorShape shape = vars[0]->tensor()->shape();
    OP_REQUIRES(ctx, shape.dim_size(1) == dim,
                errors::InvalidArgument(label, ": gradient rows have ", dim, " columns, the ",
                                        "variable ", shape.dim_size(1)));
    bool bad = false;
    int64_t r = 0;
    OP_REQUIRES_OK(ctx, rows.FirstBadRow(ctx, shape.dim_size(0), &bad, &r));
    OP_REQUIRES(ctx, !bad,
                errors::InvalidArgument(label, ": gradient row ", r, " is out of range [0, ",
                                        shape.dim_size(0), ")"));
    for (Var* v : order) {
      OP_REQUIRES_OK(ctx, PrepareInPlaceUpdate<Functor>(ctx, v));
      TableMemory<Device>::PrepareRandomRows(*v->tensor());
    }

    std::vector<T*> slots;
    std::vector<uint16_t*> bf16_slot_bits;
    for (int i = 1; i <= num_slots; ++i) {
      Tensor* slot = vars[i]->tensor();
      if (bf16_slots) {
        bf16_slot_bits.push_back(HalfBits(slot->flat<Eigen::bfloat16>().data()));
      } else {
        slots.push_back(slot->flat<T>().data());
      }
    }
    Tensor* table = vars[0]->tensor();
    OP_REQUIRES_OK(
        ctx, ForTableType<Device, T>(table->dtype(), label, [&](auto stored) -> absl::Status {
          using Stored = typename decltype(stored)::type;
          if constexpr (std::is_same_v<Stored, T>) {
            return rows.Apply(ctx, kind_, hyper, dim, table->flat<T>().data(), slots);
          } else {
            HalfRounding rounding = rounding_;
            rounding.format = HalfStorage<Stored>::kFormat;
            rounding.step = step;
            uint16_t* bits = HalfBits(table->flat<Stored>().data());
            if (bf16_slots) {
              return rows.ApplyHalfSlots(ctx, kind_, hyper, dim, bits, bf16_slot_bits, rounding);
            }
            return rows.ApplyHalf(ctx, kind_, hyper, dim, bits, slots, rounding);
          }
        }));
    if (tracker) {
      OP_REQUIRES_OK(ctx, rows.Track(ctx, tracker->tensor()->flat<int64_t>().data(), step));
    }
  }

 private:
  // The distinct variables (and the tracker, if any), in address order.
  static std::vector<tensorflow::Var*> LockOrder(
      const std::vector<tensorflow::core::RefCountPtr<tensorflow::Var>>& vars,
      tensorflow::Var* tracker) {
    std::vector<tensorflow::Var*> order;
    for (auto& v : vars) order.push_back(v.get());
    if (tracker != nullptr) order.push_back(tracker);
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end()), order.end());
    return order;
  }

  // Under the variables' locks: vars[0] an initialized 2-D table of T (or, T float32, of 16 bits)
  // and each slot of its shape, holding T or bfloat16 beside a 16-bit table (all slots alike:
  // *bf16_slots).
  static absl::Status CheckVars(
      const std::vector<tensorflow::core::RefCountPtr<tensorflow::Var>>& vars,
      const std::string& label, bool* bf16_slots) {
    const int num_slots = static_cast<int>(vars.size()) - 1;
    TF_RETURN_IF_ERROR(ForTableType<Device, T>(vars[0]->tensor()->dtype(), label,
                                               [&](auto stored) -> absl::Status {
                                                 using Stored = typename decltype(stored)::type;
                                                 return CheckTable<Stored>(vars[0].get(), label);
                                               }));
    const tensorflow::TensorShape shape = vars[0]->tensor()->shape();
    const bool half_table = vars[0]->tensor()->dtype() != tensorflow::DataTypeToEnum<T>::v();
    *bf16_slots =
        half_table && num_slots > 0 && vars[1]->tensor()->dtype() == tensorflow::DT_BFLOAT16;
    for (int i = 1; i <= num_slots; ++i) {
      const std::string slot_label = label + " slot " + std::to_string(i - 1);
      TF_RETURN_IF_ERROR(*bf16_slots ? CheckTable<Eigen::bfloat16>(vars[i].get(), slot_label)
                                     : CheckTable<T>(vars[i].get(), slot_label));
      if (vars[i]->tensor()->shape() != shape) {
        return tensorflow::errors::InvalidArgument(label, ": slot ", i - 1, " has shape ",
                                                   vars[i]->tensor()->shape().DebugString());
      }
    }
    return absl::OkStatus();
  }

  // Under the locks: the tracker (if any) an initialized int64 vector with one entry per row
  // (so never the table or a slot, which hold floating-point rows).
  static absl::Status CheckTracker(tensorflow::Var* table, tensorflow::Var* tracker,
                                   const std::string& label) {
    if (tracker == nullptr) return absl::OkStatus();
    if (!tracker->is_initialized) {
      return tensorflow::errors::FailedPrecondition(label, ": the tracker is not initialized");
    }
    const tensorflow::Tensor& t = *tracker->tensor();
    const int64_t rows = table->tensor()->dim_size(0);
    if (t.dtype() != tensorflow::DT_INT64 || t.dims() != 1 || t.dim_size(0) != rows) {
      return tensorflow::errors::InvalidArgument(label, ": the tracker must be int64 [", rows,
                                                 "], got ", tensorflow::DataTypeString(t.dtype()),
                                                 " ", t.shape().DebugString());
    }
    return absl::OkStatus();
  }

  OptimizerKind kind_;
  std::string name_;
  int num_trackers_ = 0;
  HalfRounding rounding_;  // seed and row numbering; the format and step come per call
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_OPTIMIZER_KERNELS_H_
