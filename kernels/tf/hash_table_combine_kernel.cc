// CPU kernel of SokLiteDynamicLookupCombine: one rank's lookup_sparse on a hash table, the
// find-or-create step and the per-sample combine in one pass over the ids (see
// HashTable::LookupCombine). The gradient reuses UniqueIds and SegmentCombineGrad.
#include <algorithm>
#include <string>
#include <vector>

#include "kernels/core/lookup_combine.h"
#include "kernels/core/lookup_validate.h"
#include "kernels/core/stream_store.h"
#include "kernels/tf/cpu_parallel.h"
#include "kernels/tf/hash_table_resource.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/lock_trace.h"
#include "kernels/tf/table_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"

namespace sok_lite {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;

class DynamicLookupCombineOp : public OpKernel {
 public:
  explicit DynamicLookupCombineOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dim", &dim_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("hotness", &hotness_));
    std::string combiner;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("combiner", &combiner));
    OP_REQUIRES(ctx, ParseCombiner(combiner, &combiner_),
                errors::InvalidArgument("unknown combiner '", combiner, "'"));
  }

  void Compute(OpKernelContext* ctx) override {
    const std::string label = DynamicTableLabel(name_);
    // The table before the ids, even for an empty batch (its row width never changes).
    tensorflow::core::RefCountPtr<DynamicTableResource> t;
    OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, 0), &t));
    const int64_t dim = t->table.config().dim;
    OP_REQUIRES(
        ctx, dim == dim_,
        errors::InvalidArgument(label, ": rows have ", dim, " columns, the lookup expects ", dim_));
    for (int i = 1; i <= 3; ++i) OP_REQUIRES_OK(ctx, RankInput(ctx, i, 1));
    const Tensor& ids = ctx->input(1);
    const Tensor& splits = ctx->input(2);
    const Tensor& weights_t = ctx->input(3);
    const int64_t n = ids.NumElements();
    OP_REQUIRES(ctx, splits.NumElements() >= 1,
                errors::InvalidArgument(label, ": row_splits must have at least 1 entry"));
    const int64_t batch = splits.NumElements() - 1;
    OP_REQUIRES(
        ctx, weights_t.NumElements() == 0 || weights_t.NumElements() == n,
        errors::InvalidArgument(label, ": ", weights_t.NumElements(), " weights for ", n, " ids"));
    const int64_t* keys = ids.flat<int64_t>().data();
    const int64_t* row_splits = splits.flat<int64_t>().data();
    std::string problem = CheckRowSplits(row_splits, batch, n);
    // Any int64 is a key: only a hotness limit is left to check.
    if (problem.empty() && hotness_ > 0) problem = CheckIds(keys, row_splits, batch, -1, hotness_);
    OP_REQUIRES(ctx, problem.empty(), errors::InvalidArgument(label, ": ", problem));
    const float* weights =
        n > 0 && weights_t.NumElements() == n ? weights_t.flat<float>().data() : nullptr;
    std::vector<float> scale;
    if (combiner_ != Combiner::kSum) {
      scale.resize(batch);
      ParallelFor(ctx, batch, 20 * (1 + n / std::max<int64_t>(batch, 1)),
                  [&](int64_t b0, int64_t b1) {
                    SampleScales(row_splits, weights, combiner_, b0, b1, scale.data());
                  });
    }

    LockTrace trace(t.get(), "lookup");
    tensorflow::mutex_lock lock(t->mu);
    trace.Held();
    TensorShape shape;
    OP_REQUIRES_OK(ctx, SafeShape({batch, dim}, &shape));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    const int64_t per_sample = (1 + n / std::max<int64_t>(batch, 1)) * (2 * dim + 40);
    const HashTable::Runner run =
        [ctx, per_sample](int64_t total, const std::function<void(int64_t, int64_t)>& fn) {
          ParallelFor(ctx, total, per_sample, fn);
        };
    problem = t->table.LookupCombine(
        keys, row_splits, batch, weights, scale.empty() ? nullptr : scale.data(),
        out->flat<float>().data(), out->TotalBytes() >= kStreamOutputBytes, run);
    OP_REQUIRES(ctx, problem.empty(), errors::InvalidArgument(label, ": ", problem));
  }

 private:
  std::string name_;
  int64_t dim_ = 0;
  int64_t hotness_ = 0;
  Combiner combiner_ = Combiner::kSum;
};

REGISTER_KERNEL_BUILDER(Name("SokLiteDynamicLookupCombine").Device(::tensorflow::DEVICE_CPU),
                        DynamicLookupCombineOp);

}  // namespace sok_lite
