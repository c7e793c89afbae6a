// The CPU-only kernels that the disk tier brought: an export a piece at a time over both tiers
// (sok.dump never holds a whole table) and the memory counters of DynamicVariable.memory_stats.
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/tf/hash_table_resource.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/table_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"

namespace sok_lite {
namespace {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;

class DynamicExportRangeOp : public tensorflow::OpKernel {
 public:
  explicit DynamicExportRangeOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("with_slots", &with_slots_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
  }

  void Compute(OpKernelContext* ctx) override {
    const std::string label = DynamicTableLabel(name_);
    tensorflow::core::RefCountPtr<DynamicTableResource> t;
    OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, 0), &t));
    int64_t since = 0, cursor = 0, limit = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 1, &since));
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 2, &cursor));
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, 3, &limit));
    OP_REQUIRES(ctx, limit >= 1 && cursor >= 0,
                errors::InvalidArgument(label, ": export range from ", cursor, " of ", limit,
                                        " rows; cursor must be >= 0 and limit >= 1"));
    // Reading rows back from disk moves nothing: a shared lock suffices.
    tensorflow::tf_shared_lock lock(t->mu);
    std::vector<int64_t> keys;
    std::vector<float> rows;
    int64_t next = -1;
    const std::string problem = t->table.ExportRange(since, cursor, limit, &keys, &rows, &next);
    OP_REQUIRES(ctx, problem.empty(), errors::InvalidArgument(label, ": ", problem));
    // rows holds whole records (16-bit values packed); ReadRow gives them as float32 columns.
    const int64_t n = keys.size(), record = t->table.stride();
    const int64_t width = with_slots_ ? t->stride() : t->dim();
    Tensor *keys_out, *values_out, *next_out;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &keys_out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({n, width}), &values_out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({}), &next_out));
    std::copy(keys.begin(), keys.end(), keys_out->flat<int64_t>().data());
    float* values = values_out->flat<float>().data();
    for (int64_t i = 0; i < n; ++i) {
      t->table.ReadRow(rows.data() + i * record, with_slots_, values + i * width);
    }
    next_out->scalar<int64_t>()() = next;
  }

 private:
  bool with_slots_ = false;
  std::string name_;
};

class DynamicMemoryStatsOp : public tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableResource> t;
    OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, 0), &t));
    tensorflow::tf_shared_lock lock(t->mu);
    const std::vector<int64_t> stats = t->table.MemoryStats();
    Tensor* out = nullptr;
    OP_REQUIRES_OK(
        ctx, ctx->allocate_output(0, TensorShape({static_cast<int64_t>(stats.size())}), &out));
    std::copy(stats.begin(), stats.end(), out->flat<int64_t>().data());
  }
};

REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicExportRange").Device(::tensorflow::DEVICE_CPU),
                        DynamicExportRangeOp);
REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicMemoryStats").Device(::tensorflow::DEVICE_CPU),
                        DynamicMemoryStatsOp);

}  // namespace
}  // namespace sok_lite
