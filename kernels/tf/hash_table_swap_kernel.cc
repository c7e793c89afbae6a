// SokLiteDynamicSwapRows: swaps a staged hash table's rows into a live one (CPU tables), the
// commit step of a checkpoint load that must change nothing when it fails.
#include <string>

#include "kernels/tf/hash_table_resource.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace sok_lite {

REGISTER_OP("SokLiteDynamicSwapRows")
    .Input("table: resource")
    .Input("staged: resource")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs)
    .Doc(R"doc(
Exchanges the rows of `table` and `staged` (both tiers, slot layout, lookup step); each keeps its
configuration and counters. Disk-tier files move into the directory of the table that now holds
them. Nothing changes on error.
)doc");

class DynamicSwapRowsOp : public tensorflow::OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(tensorflow::OpKernelContext* ctx) override {
    tensorflow::core::RefCountPtr<DynamicTableResource> table;
    tensorflow::core::RefCountPtr<DynamicTableResource> staged;
    OP_REQUIRES_OK(ctx,
                   tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 0), &table));
    OP_REQUIRES_OK(ctx,
                   tensorflow::LookupResource(ctx, tensorflow::HandleFromInput(ctx, 1), &staged));
    OP_REQUIRES(ctx, table.get() != staged.get(),
                tensorflow::errors::InvalidArgument("a table cannot be swapped with itself"));
    // Locked in address order: two swaps of the same pair cannot deadlock.
    DynamicTableResource* first = table.get() < staged.get() ? table.get() : staged.get();
    DynamicTableResource* second = first == table.get() ? staged.get() : table.get();
    tensorflow::mutex_lock lock_first(first->mu);
    tensorflow::mutex_lock lock_second(second->mu);
    const std::string problem = table->table.SwapRows(&staged->table);
    OP_REQUIRES(ctx, problem.empty(), tensorflow::errors::InvalidArgument(problem));
  }
};

REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicSwapRows").Device(tensorflow::DEVICE_CPU),
                        DynamicSwapRowsOp);

}  // namespace sok_lite
