// The kernels of the dynamic (hash) table ops, one class template per op shared by the CPU and
// GPU op libraries: attribute reads, input checks, locking, output allocation and error texts
// live here once. The table resource and the arithmetic differ by device: DynamicTableTraits
// names the resource (DynamicTableResource in kernels/tf/hash_table_kernels.cc,
// DynamicTableGpuResource in kernels/tf_gpu/hash_table_resource_gpu.h) and the functors below are
// defined per device. Both resources offer mu, dim(), num_slots(), stride() (float32 columns of
// a row with its slots, as export and assign carry it), AddSlots and SetSlotInit.
#ifndef SOK_LITE_KERNELS_TF_HASH_TABLE_KERNELS_H_
#define SOK_LITE_KERNELS_TF_HASH_TABLE_KERNELS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/optimizer.h"
#include "kernels/tf/device.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/kernel_args.h"
#include "kernels/tf/lock_trace.h"
#include "kernels/tf/optimizer_args.h"
#include "kernels/tf/table_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/platform/mutex.h"

namespace sok_lite {

// Per device: `Table`, the resource type; kPolicies, whether the table has capacity eviction
// and admission counting; kMaxSlots (int64_t), the optimizer slots a table holds; kMaxStepKeys,
// a bound on the keys of one optimizer step.
template <typename Device>
struct DynamicTableTraits;

template <typename Device>
using DynamicTable = typename DynamicTableTraits<Device>::Table;

// Creates the table of a SokLiteDynamicTable op (the resource manager's create callback).
template <typename Device>
struct DynamicCreateFunctor {
  static absl::Status Compute(tensorflow::OpKernelContext* ctx, const TableConfig& config,
                              DynamicTable<Device>** out);
};

// One lookup step: rows of keys[0, n) into out ([n, dim]). A problem with the keys goes to
// *problem, which the kernel reports.
template <typename Device>
struct DynamicLookupFunctor {
  static absl::Status Compute(tensorflow::OpKernelContext* ctx, DynamicTable<Device>* t,
                              const int64_t* keys, int64_t n, float* out, std::string* problem);
};

// An optimizer step on the stored rows of keys (shapes checked, slots laid out).
template <typename Device>
struct DynamicApplyFunctor {
  static absl::Status Compute(tensorflow::OpKernelContext* ctx, DynamicTable<Device>* t,
                              OptimizerKind kind, const OptimizerHyper& hyper,
                              const tensorflow::Tensor& keys, const tensorflow::Tensor& grads,
                              int64_t step);
};

// Export in two calls: Count, then (outputs allocated for that count) Export. An object, so
// that a device can keep what Count computed for Export.
template <typename Device>
struct DynamicExportFunctor {
  absl::Status Count(tensorflow::OpKernelContext* ctx, DynamicTable<Device>* t, int64_t since,
                     int64_t* n);
  absl::Status Export(tensorflow::OpKernelContext* ctx, DynamicTable<Device>* t, int64_t since,
                      bool with_slots, int64_t n, int64_t* keys, float* values);
  tensorflow::Tensor state;  // what Count leaves for Export, where a device needs it
};

// Stores rows of `width` floats (value, or value and slots) for keys[0, n) at `step`.
template <typename Device>
struct DynamicAssignFunctor {
  static absl::Status Compute(tensorflow::OpKernelContext* ctx, DynamicTable<Device>* t,
                              const int64_t* keys, int64_t n, const float* values, bool with_slots,
                              int64_t step);
};

// The maintenance ops: the row count into *out (a scalar output), eviction of the rows unseen
// for the last `steps` lookup steps (steps >= 1), removal of every row.
template <typename Device>
struct DynamicMaintenanceFunctor {
  static absl::Status Size(tensorflow::OpKernelContext* ctx, DynamicTable<Device>* t,
                           tensorflow::Tensor* out);
  static absl::Status Evict(tensorflow::OpKernelContext* ctx, DynamicTable<Device>* t,
                            int64_t steps, int64_t* evicted);
  static absl::Status Clear(tensorflow::OpKernelContext* ctx, DynamicTable<Device>* t);
};

// An error of a table's functor, named after the table (a disk tier's failures come from deep
// inside and do not know the table's name).
inline absl::Status NamedError(const absl::Status& status, const std::string& label) {
  if (status.ok()) return status;
  return absl::Status(status.code(), label + ": " + std::string(status.message()));
}

// The table of the resource handle at input 0 (an error for a handle of another type or
// device, e.g. a CPU table given to a GPU kernel).
template <typename Device>
absl::Status GetDynamicTable(tensorflow::OpKernelContext* ctx,
                             tensorflow::core::RefCountPtr<DynamicTable<Device>>* t) {
  return tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 0), t);
}

template <typename Device>
class DynamicTableOp : public tensorflow::OpKernel {
 public:
  using Table = DynamicTable<Device>;

  explicit DynamicTableOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    namespace errors = ::tensorflow::errors;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("container", &container_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shared_name", &name_));
    OP_REQUIRES_OK(ctx, ReadTableConfig(ctx, &config_));
    if (!DynamicTableTraits<Device>::kPolicies) {
      const std::string label = "hash table '" + name_ + "'";
      OP_REQUIRES(ctx, config_.capacity <= 0,
                  errors::InvalidArgument(label, ": capacity ", config_.capacity,
                                          " eviction is CPU-only; create this table on the CPU"));
      OP_REQUIRES(ctx, config_.min_count <= 1,
                  errors::InvalidArgument(label, ": min_count ", config_.min_count,
                                          " admission is CPU-only; create this table on the CPU"));
      OP_REQUIRES(ctx, !config_.half_values,
                  errors::InvalidArgument(
                      label, ": 16-bit storage is CPU-only; create this table on the CPU"));
      OP_REQUIRES(ctx, config_.tier_dir.empty(),
                  errors::InvalidArgument(label,
                                          ": the disk tier is CPU-only; create this "
                                          "table on the CPU"));
    }
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    auto* rm = ctx->resource_manager();
    const std::string container = container_.empty() ? rm->default_container() : container_;
    Table* table = nullptr;
    OP_REQUIRES_OK(ctx, rm->LookupOrCreate<Table>(container, name_, &table, [&](Table** t) {
      return NamedError(DynamicCreateFunctor<Device>::Compute(ctx, config_, t),
                        "hash table '" + name_ + "'");
    }));
    table->Unref();
    tensorflow::Tensor* handle = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({}), &handle));
    handle->scalar<tensorflow::ResourceHandle>()() =
        tensorflow::MakeResourceHandle<Table>(ctx, container, name_);
  }

 private:
  std::string container_, name_;
  TableConfig config_;
};

template <typename Device>
class DynamicLookupOp : public tensorflow::OpKernel {
 public:
  explicit DynamicLookupOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dim", &dim_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    namespace errors = ::tensorflow::errors;
    tensorflow::core::RefCountPtr<DynamicTable<Device>> t;
    OP_REQUIRES_OK(ctx, GetDynamicTable<Device>(ctx, &t));
    const tensorflow::Tensor& keys = ctx->input(1);
    const int64_t n = keys.NumElements();
    LockTrace trace(t.get(), "lookup");
    tensorflow::mutex_lock lock(t->mu);
    trace.Held();
    const int64_t dim = t->dim();
    OP_REQUIRES(ctx, dim == dim_,
                errors::InvalidArgument(DynamicTableLabel(name_), ": rows have ", dim,
                                        " columns, the lookup expects ", dim_));
    tensorflow::TensorShape shape;
    OP_REQUIRES_OK(ctx, SafeShape({n, dim}, &shape));
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    // Keys may repeat (the table counts each once per step); rows come back in key order.
    // Every call is a step, even an empty one.
    std::string problem;
    OP_REQUIRES_OK(
        ctx, DynamicLookupFunctor<Device>::Compute(ctx, t.get(), keys.flat<int64_t>().data(), n,
                                                   out->flat<float>().data(), &problem));
    OP_REQUIRES(ctx, problem.empty(),
                errors::InvalidArgument(DynamicTableLabel(name_), ": ", problem));
  }

 private:
  std::string name_;
  int64_t dim_ = 0;
};

template <typename Device>
class DynamicApplyOp : public tensorflow::OpKernel {
 public:
  explicit DynamicApplyOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadOptimizerKind(ctx, &kind_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("slot_init", &slot_init_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    namespace errors = ::tensorflow::errors;
    tensorflow::core::RefCountPtr<DynamicTable<Device>> t;
    OP_REQUIRES_OK(ctx, GetDynamicTable<Device>(ctx, &t));
    const tensorflow::Tensor& keys = ctx->input(1);
    const tensorflow::Tensor& grads = ctx->input(2);
    int64_t step = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 4, &step));  // host memory
    const std::string label = DynamicTableLabel(name_);
    OptimizerHyper hyper;  // hyper: host memory
    OP_REQUIRES_OK(ctx, ReadOptimizerHyper(ctx->input(3), kind_,
                                           static_cast<int>(slot_init_.size()), label, &hyper));
    const int64_t n = keys.NumElements();
    LockTrace trace(t.get(), "update");
    tensorflow::mutex_lock lock(t->mu);
    trace.Held();
    const int64_t dim = t->dim();
    OP_REQUIRES(ctx, grads.dims() == 2 && grads.dim_size(0) == n && grads.dim_size(1) == dim,
                errors::InvalidArgument(label, ": gradient shape ", grads.shape().DebugString(),
                                        " does not match ", n, " keys of dim ", dim));
    if (t->num_slots() == 0 && !slot_init_.empty())
      OP_REQUIRES_OK(ctx, NamedError(t->AddSlots(ctx, slot_init_), label));
    OP_REQUIRES(ctx, t->num_slots() == static_cast<int>(slot_init_.size()),
                errors::InvalidArgument(label, " holds ", t->num_slots(),
                                        " optimizer slots; this optimizer needs ",
                                        slot_init_.size(), " (one optimizer per table)"));
    // Slots restored from a checkpoint were laid out before the optimizer was known.
    t->SetSlotInit(slot_init_);
    OP_REQUIRES(ctx, n < DynamicTableTraits<Device>::kMaxStepKeys,
                errors::InvalidArgument(label, ": more than 2^31 keys in one step"));
    // Gradients of repeated keys are summed, every stored row is updated once, keys without a
    // row are skipped, and updated rows record the step.
    OP_REQUIRES_OK(ctx, NamedError(DynamicApplyFunctor<Device>::Compute(ctx, t.get(), kind_, hyper,
                                                                        keys, grads, step),
                                   label));
  }

 private:
  OptimizerKind kind_;
  std::vector<float> slot_init_;
  std::string name_;
};

template <typename Device>
class DynamicExportOp : public tensorflow::OpKernel {
 public:
  explicit DynamicExportOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_slots", &with_slots_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTable<Device>> t;
    OP_REQUIRES_OK(ctx, GetDynamicTable<Device>(ctx, &t));
    int64_t since = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 1, &since));  // host memory
    tensorflow::tf_shared_lock lock(t->mu);
    const int64_t width = with_slots_ ? t->stride() : t->dim();
    DynamicExportFunctor<Device> functor;
    int64_t n = 0;
    OP_REQUIRES_OK(ctx,
                   NamedError(functor.Count(ctx, t.get(), since, &n), DynamicTableLabel(name_)));
    tensorflow::Tensor *keys, *values;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({n}), &keys));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, tensorflow::TensorShape({n, width}), &values));
    OP_REQUIRES_OK(
        ctx, NamedError(functor.Export(ctx, t.get(), since, with_slots_, n,
                                       keys->flat<int64_t>().data(), values->flat<float>().data()),
                        DynamicTableLabel(name_)));
  }

 private:
  bool with_slots_ = false;
  std::string name_;
};

template <typename Device>
class DynamicAssignOp : public tensorflow::OpKernel {
 public:
  explicit DynamicAssignOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_slots", &with_slots_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("slot_init", &slot_init_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    namespace errors = ::tensorflow::errors;
    tensorflow::core::RefCountPtr<DynamicTable<Device>> t;
    OP_REQUIRES_OK(ctx, GetDynamicTable<Device>(ctx, &t));
    const tensorflow::Tensor& keys = ctx->input(1);
    const tensorflow::Tensor& values = ctx->input(2);
    int64_t step = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 3, &step));  // host memory
    const int64_t n = keys.NumElements();
    tensorflow::mutex_lock lock(t->mu);
    const int64_t dim = t->dim();
    // Slots are laid out only for a well-formed call: a rejected assign changes nothing.
    if (with_slots_ && values.dims() == 2 && values.dim_size(0) == n &&
        values.dim_size(1) > t->stride() && values.dim_size(1) % dim == 0) {
      // Rows carry more slots than the table has yet (a restore before the first optimizer
      // step): lay them out, starting from slot_init when given (rows created before the first
      // step then start where the optimizer would start them), else from zero until an
      // optimizer sets their initial values.
      const int64_t extra = (values.dim_size(1) - t->stride()) / dim;
      OP_REQUIRES(ctx, t->num_slots() + extra <= DynamicTableTraits<Device>::kMaxSlots,
                  errors::InvalidArgument("assign: rows with ", t->num_slots() + extra,
                                          " optimizer slots; a GPU table holds at most ",
                                          DynamicTableTraits<Device>::kMaxSlots));
      const bool given = t->num_slots() == 0 && static_cast<int64_t>(slot_init_.size()) == extra;
      OP_REQUIRES_OK(
          ctx, NamedError(t->AddSlots(ctx, given ? slot_init_ : std::vector<float>(extra, 0.0f)),
                          DynamicTableLabel(name_)));
      if (given) t->SetSlotInit(slot_init_);
    }
    const int64_t width = with_slots_ ? t->stride() : dim;
    OP_REQUIRES(ctx, values.dims() == 2 && values.dim_size(0) == n && values.dim_size(1) == width,
                errors::InvalidArgument("assign: values of shape ", values.shape().DebugString(),
                                        " for ", n, " keys of width ", width));
    OP_REQUIRES_OK(ctx, NamedError(DynamicAssignFunctor<Device>::Compute(
                                       ctx, t.get(), keys.flat<int64_t>().data(), n,
                                       values.flat<float>().data(), with_slots_, step),
                                   DynamicTableLabel(name_)));
  }

 private:
  bool with_slots_ = false;
  std::string name_;
  std::vector<float> slot_init_;
};

template <typename Device>
class DynamicSizeOp : public tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(tensorflow::OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTable<Device>> t;
    OP_REQUIRES_OK(ctx, GetDynamicTable<Device>(ctx, &t));
    tensorflow::tf_shared_lock lock(t->mu);
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({}), &out));
    OP_REQUIRES_OK(ctx, DynamicMaintenanceFunctor<Device>::Size(ctx, t.get(), out));
  }
};

template <typename Device>
class DynamicEvictOp : public tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(tensorflow::OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTable<Device>> t;
    OP_REQUIRES_OK(ctx, GetDynamicTable<Device>(ctx, &t));
    int64_t steps = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 1, &steps));  // host memory
    OP_REQUIRES(ctx, steps >= 1, tensorflow::errors::InvalidArgument("steps_unseen must be >= 1"));
    tensorflow::mutex_lock lock(t->mu);
    tensorflow::Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, tensorflow::TensorShape({}), &out));  // host
    int64_t evicted = 0;
    OP_REQUIRES_OK(ctx, DynamicMaintenanceFunctor<Device>::Evict(ctx, t.get(), steps, &evicted));
    out->scalar<int64_t>()() = evicted;
  }
};

template <typename Device>
class DynamicClearOp : public tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(tensorflow::OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTable<Device>> t;
    OP_REQUIRES_OK(ctx, GetDynamicTable<Device>(ctx, &t));
    tensorflow::mutex_lock lock(t->mu);
    OP_REQUIRES_OK(ctx, DynamicMaintenanceFunctor<Device>::Clear(ctx, t.get()));
  }
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_HASH_TABLE_KERNELS_H_
