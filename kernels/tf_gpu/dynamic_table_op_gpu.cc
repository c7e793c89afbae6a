// GPU kernel of SokLiteDynamicTable (op registered in kernels/tf/dynamic_ops.cc): creates (or
// finds, by shared_name) a hash table in device memory. The GPU table has no admission counting
// and no capacity eviction, so a table that asks for either is refused here.
#include <string>

#include "kernels/core/row_init.h"
#include "kernels/tf/kernel_args.h"
#include "kernels/tf_gpu/dynamic_table_gpu.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"

namespace sok_lite {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;

class DynamicTableGpuOp : public OpKernel {
 public:
  explicit DynamicTableGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    TableConfig config;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("container", &container_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shared_name", &name_));
    OP_REQUIRES_OK(ctx, ReadTableConfig(ctx, &config));
    const std::string label = "dynamic table '" + name_ + "'";
    OP_REQUIRES(ctx, config.capacity <= 0,
                errors::InvalidArgument(label, ": capacity ", config.capacity,
                                        " eviction is CPU-only; create this table on the CPU"));
    OP_REQUIRES(ctx, config.min_count <= 1,
                errors::InvalidArgument(label, ": min_count ", config.min_count,
                                        " admission is CPU-only; create this table on the CPU"));
    dim_ = config.dim;
    // SokLiteCudaInitKind has InitKind's order.
    init_ = {static_cast<int>(config.init.kind), config.init.seed, config.init.a, config.init.b};
  }

  void Compute(OpKernelContext* ctx) override {
    auto* rm = ctx->resource_manager();
    const std::string container = container_.empty() ? rm->default_container() : container_;
    DynamicTableGpuResource* table = nullptr;
    OP_REQUIRES_OK(ctx, rm->LookupOrCreate<DynamicTableGpuResource>(
                            container, name_, &table, [&](DynamicTableGpuResource** t) {
                              auto* created = new DynamicTableGpuResource(dim_, init_);
                              absl::Status s;
                              {
                                tensorflow::mutex_lock lock(created->mu);
                                s = created->Initialize(ctx);
                              }
                              if (!s.ok()) {  // not registered: release it here
                                created->Unref();
                                return s;
                              }
                              *t = created;
                              return s;
                            }));
    table->Unref();
    Tensor* handle = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &handle));
    handle->scalar<tensorflow::ResourceHandle>()() =
        tensorflow::MakeResourceHandle<DynamicTableGpuResource>(ctx, container, name_);
  }

 private:
  std::string container_, name_;
  int64_t dim_ = 0;
  SokLiteCudaRowInit init_ = {};
};

REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicTable").Device(::tensorflow::DEVICE_GPU),
                        DynamicTableGpuOp);

}  // namespace sok_lite
