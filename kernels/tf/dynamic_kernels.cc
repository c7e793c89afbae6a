// CPU kernels of the dynamic (hash) table family.
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/core/optimizers.h"
#include "kernels/core/unique.h"
#include "kernels/tf/cpu_parallel.h"
#include "kernels/tf/dynamic_table.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/kernel_args.h"
#include "kernels/tf/optimizer_args.h"
#include "kernels/tf/table_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"

namespace sok_lite {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;

namespace {

absl::Status GetTable(OpKernelContext* ctx,
                      tensorflow::core::RefCountPtr<DynamicTableResource>* t) {
  return LookupResource(ctx, HandleFromInput(ctx, 0), t);
}

}  // namespace

class DynamicTableOp : public OpKernel {
 public:
  explicit DynamicTableOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("container", &container_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shared_name", &name_));
    OP_REQUIRES_OK(ctx, ReadTableConfig(ctx, &config_));
  }

  void Compute(OpKernelContext* ctx) override {
    auto* rm = ctx->resource_manager();
    const std::string container = container_.empty() ? rm->default_container() : container_;
    DynamicTableResource* table = nullptr;
    OP_REQUIRES_OK(ctx, rm->LookupOrCreate<DynamicTableResource>(
                            container, name_, &table, [this](DynamicTableResource** t) {
                              *t = new DynamicTableResource(config_);
                              return absl::OkStatus();
                            }));
    table->Unref();
    Tensor* handle = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &handle));
    handle->scalar<tensorflow::ResourceHandle>()() =
        tensorflow::MakeResourceHandle<DynamicTableResource>(ctx, container, name_);
  }

 private:
  std::string container_, name_;
  TableConfig config_;
};

class DynamicLookupOp : public OpKernel {
 public:
  explicit DynamicLookupOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dim", &dim_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableResource> t;
    OP_REQUIRES_OK(ctx, GetTable(ctx, &t));
    const Tensor& keys = ctx->input(1);
    const int64_t n = keys.NumElements();
    const HashTable::Runner run = [ctx](int64_t total,
                                        const std::function<void(int64_t, int64_t)>& fn) {
      ParallelFor(ctx, total, 2000, fn);
    };
    tensorflow::mutex_lock lock(t->mu);
    const int64_t dim = t->table.config().dim;
    OP_REQUIRES(ctx, dim == dim_,
                errors::InvalidArgument(DynamicTableLabel(name_), ": rows have ", dim,
                                        " columns, the lookup "
                                        "expects ",
                                        dim_));
    TensorShape shape;
    OP_REQUIRES_OK(ctx, SafeShape({n, dim}, &shape));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    // Keys may repeat (the table counts each once per step); rows come back in key order.
    const std::string problem =
        t->table.Lookup(keys.flat<int64_t>().data(), n, out->flat<float>().data(), run);
    OP_REQUIRES(ctx, problem.empty(),
                errors::InvalidArgument(DynamicTableLabel(name_), ": ", problem));
  }

 private:
  std::string name_;
  int64_t dim_ = 0;
};

class DynamicApplyOp : public OpKernel {
 public:
  explicit DynamicApplyOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadOptimizerKind(ctx, &kind_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("slot_init", &slot_init_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableResource> t;
    OP_REQUIRES_OK(ctx, GetTable(ctx, &t));
    const Tensor& keys_t = ctx->input(1);
    const Tensor& grads = ctx->input(2);
    int64_t step = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 4, &step));
    const std::string label = DynamicTableLabel(name_);
    OptimizerHyper hyper;
    OP_REQUIRES_OK(ctx, ReadOptimizerHyper(ctx->input(3), kind_,
                                           static_cast<int>(slot_init_.size()), label, &hyper));
    const int64_t n = keys_t.NumElements();
    tensorflow::mutex_lock lock(t->mu);
    HashTable& table = t->table;
    const int64_t dim = table.config().dim;
    OP_REQUIRES(ctx, grads.dims() == 2 && grads.dim_size(0) == n && grads.dim_size(1) == dim,
                errors::InvalidArgument(label, ": gradient shape ", grads.shape().DebugString(),
                                        " does not match ", n, " keys of dim ", dim));
    if (table.num_slots() == 0 && !slot_init_.empty()) {
      std::vector<float> init(slot_init_.begin(), slot_init_.end());
      table.AddSlots(init);
    }
    OP_REQUIRES(ctx, table.num_slots() == static_cast<int>(slot_init_.size()),
                errors::InvalidArgument(label, " holds ", table.num_slots(),
                                        " optimizer slots; this optimizer needs ",
                                        slot_init_.size(), " (one optimizer per table)"));
    // Slots restored from a checkpoint were laid out before the optimizer was known.
    table.SetSlotInit(std::vector<float>(slot_init_.begin(), slot_init_.end()));
    // Sum the gradients of repeated keys (lookup_sparse's never repeat, so no copy then), then
    // update each stored row once, rows found and updated on all threads.
    std::vector<int64_t> unique;
    std::vector<float> summed;
    const float* g = SumRepeatedRows(keys_t.flat<int64_t>().data(), n, grads.flat<float>().data(),
                                     dim, &unique, &summed);
    const int64_t* k = unique.data();
    const int64_t u = unique.size();
    const HashTable::Runner run = [ctx](int64_t total,
                                        const std::function<void(int64_t, int64_t)>& fn) {
      ParallelFor(ctx, total, 500, fn);
    };
    std::vector<float*> records(u);
    table.RecordsForUpdate(k, u, step, records.data(), run);
    ParallelFor(ctx, u, 40 * dim * (1 + table.num_slots()), [&](int64_t i0, int64_t i1) {
      ApplyRowRecords(kind_, hyper, dim, table.num_slots(), records.data(), g, i0, i1);
    });
  }

 private:
  OptimizerKind kind_;
  std::vector<float> slot_init_;
  std::string name_;
};

class DynamicExportOp : public OpKernel {
 public:
  explicit DynamicExportOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_slots", &with_slots_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableResource> t;
    OP_REQUIRES_OK(ctx, GetTable(ctx, &t));
    int64_t since = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 1, &since));
    tensorflow::tf_shared_lock lock(t->mu);
    HashTable& table = t->table;
    const int64_t width = with_slots_ ? table.stride() : table.config().dim;
    const int64_t n = table.CountSince(since);
    Tensor *keys, *values;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &keys));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({n, width}), &values));
    int64_t i = 0;
    int64_t* k = keys->flat<int64_t>().data();
    float* v = values->flat<float>().data();
    table.ForEach(since, [&](int64_t key, const float* row) {
      k[i] = key;
      std::copy(row, row + width, v + i * width);
      ++i;
    });
  }

 private:
  bool with_slots_ = false;
};

class DynamicAssignOp : public OpKernel {
 public:
  explicit DynamicAssignOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_slots", &with_slots_));
  }

  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableResource> t;
    OP_REQUIRES_OK(ctx, GetTable(ctx, &t));
    const Tensor& keys = ctx->input(1);
    const Tensor& values = ctx->input(2);
    int64_t step = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 3, &step));
    tensorflow::mutex_lock lock(t->mu);
    HashTable& table = t->table;
    const int64_t dim = table.config().dim;
    // Slots are laid out only for a well-formed call: a rejected assign changes nothing.
    if (with_slots_ && values.dims() == 2 && values.dim_size(0) == keys.NumElements() &&
        values.dim_size(1) > table.stride() && values.dim_size(1) % dim == 0) {
      // Rows carry more slots than the table has yet (a restore before the first optimizer
      // step): lay them out, starting from zero until an optimizer sets their initial values.
      table.AddSlots(std::vector<float>((values.dim_size(1) - table.stride()) / dim, 0.0f));
    }
    const int64_t width = with_slots_ ? table.stride() : dim;
    OP_REQUIRES(ctx,
                values.dims() == 2 && values.dim_size(0) == keys.NumElements() &&
                    values.dim_size(1) == width,
                errors::InvalidArgument("assign: values of shape ", values.shape().DebugString(),
                                        " for ", keys.NumElements(), " keys of width ", width));
    const int64_t* k = keys.flat<int64_t>().data();
    const float* v = values.flat<float>().data();
    for (int64_t i = 0; i < keys.NumElements(); ++i)
      table.Assign(k[i], v + i * width, with_slots_, step);
  }

 private:
  bool with_slots_ = false;
};

class DynamicSizeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableResource> t;
    OP_REQUIRES_OK(ctx, GetTable(ctx, &t));
    tensorflow::tf_shared_lock lock(t->mu);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int64_t>()() = t->table.size();
  }
};

class DynamicEvictOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableResource> t;
    OP_REQUIRES_OK(ctx, GetTable(ctx, &t));
    int64_t steps = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 1, &steps));
    OP_REQUIRES(ctx, steps >= 1, errors::InvalidArgument("steps_unseen must be >= 1"));
    tensorflow::mutex_lock lock(t->mu);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int64_t>()() = t->table.EvictUnseen(steps);
  }
};

class DynamicClearOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableResource> t;
    OP_REQUIRES_OK(ctx, GetTable(ctx, &t));
    tensorflow::mutex_lock lock(t->mu);
    t->table.Clear();
  }
};

REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicClear").Device(DEVICE_CPU), DynamicClearOp);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicTable").Device(DEVICE_CPU), DynamicTableOp);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicLookup").Device(DEVICE_CPU), DynamicLookupOp);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicApply").Device(DEVICE_CPU), DynamicApplyOp);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicExport").Device(DEVICE_CPU), DynamicExportOp);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicAssign").Device(DEVICE_CPU), DynamicAssignOp);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicSize").Device(DEVICE_CPU), DynamicSizeOp);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicEvict").Device(DEVICE_CPU), DynamicEvictOp);

}  // namespace sok_lite
