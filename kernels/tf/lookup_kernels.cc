// CPU kernels of the lookup family; the math lives in kernels/core.
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/combine.h"
#include "kernels/core/prefetch.h"
#include "kernels/core/stream_store.h"
#include "kernels/core/unique.h"
#include "kernels/core/validate.h"
#include "kernels/tf/cpu_parallel.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/kernel_args.h"
#include "kernels/tf/row_splits_op.h"
#include "kernels/tf/table_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"

namespace sok_lite {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpInputList;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;

namespace {

// Validated view of one table's ragged segments: inverse / row_splits / weights inputs.
struct Segments {
  const int32_t* inverse = nullptr;
  const int64_t* row_splits = nullptr;
  const void* weights = nullptr;  // null: every weight is 1
  int64_t n = 0;
  int64_t batch = 0;
};

// Reads and checks the segment inputs of table t (at input offsets n_tables * {1, 2, 3} + t).
bool ReadSegments(OpKernelContext* ctx, int n_tables, int t, int64_t num_unique, Segments* seg) {
  const Tensor& inverse = ctx->input(n_tables + t);
  const Tensor& splits = ctx->input(2 * n_tables + t);
  const Tensor& weights = ctx->input(3 * n_tables + t);
  const std::string label = TableLabel({}, t);
  if (splits.NumElements() < 1) {
    ctx->CtxFailure(errors::InvalidArgument(label, ": row_splits must have at least 1 entry"));
    return false;
  }
  seg->inverse = inverse.flat<int32_t>().data();
  seg->row_splits = splits.flat<int64_t>().data();
  seg->n = inverse.NumElements();
  seg->batch = splits.NumElements() - 1;
  std::string problem = CheckRowSplits(seg->row_splits, seg->batch, seg->n);
  if (problem.empty()) problem = CheckInverse(seg->inverse, seg->n, num_unique);
  if (problem.empty() && weights.NumElements() != 0 && weights.NumElements() != seg->n) {
    problem = "weights have " + std::to_string(weights.NumElements()) + " entries for " +
              std::to_string(seg->n) + " ids";
  }
  if (!problem.empty()) {
    ctx->CtxFailure(errors::InvalidArgument(label, ": ", problem));
    return false;
  }
  seg->weights = weights.NumElements() == 0 ? nullptr : weights.data();
  return true;
}

}  // namespace

class UniqueIdsOp : public OpKernel {
 public:
  explicit UniqueIdsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, args_.Read(ctx));
  }

  void Compute(OpKernelContext* ctx) override {
    OpInputList ids, splits;
    OP_REQUIRES_OK(ctx, ctx->input_list("ids", &ids));
    OP_REQUIRES_OK(ctx, ctx->input_list("row_splits", &splits));
    const int n_tables = ids.size();
    for (int t = 0; t < n_tables; ++t) {
      OP_REQUIRES(ctx, ids[t].NumElements() < (int64_t{1} << 31),
                  errors::InvalidArgument(TableLabel(args_.names, t), ": more than 2^31 ids"));
      OP_REQUIRES(ctx, splits[t].NumElements() >= 1,
                  errors::InvalidArgument(TableLabel(args_.names, t),
                                          ": row_splits must have at least 1 entry"));
    }
    std::vector<std::string> problems(n_tables);
    std::vector<std::unique_ptr<int64_t[]>> uniques(n_tables);  // n each, uninitialized
    std::vector<int64_t> counts(n_tables);
    std::vector<int32_t*> inverses(n_tables);
    for (int t = 0; t < n_tables; ++t) {
      Tensor* inverse = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(n_tables + t, ids[t].shape(), &inverse));
      inverses[t] = inverse->flat<int32_t>().data();
      uniques[t].reset(new int64_t[std::max<int64_t>(ids[t].NumElements(), 1)]);
    }
    // Two tasks per table, run side by side: the checks, and the dedup (safe on unchecked ids:
    // any int64 value is a valid key to it; its result is dropped if a check fails).
    ParallelFor(ctx, 2 * n_tables, 50 * (1 + ids[0].NumElements()), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t t = i / 2;
        const int64_t n = ids[t].NumElements();
        const int64_t batch = splits[t].NumElements() - 1;
        const int64_t* id = ids[t].flat<int64_t>().data();
        const int64_t* rs = splits[t].flat<int64_t>().data();
        if (i % 2 == 0) {
          problems[t] = CheckRowSplits(rs, batch, n);
          if (problems[t].empty()) {
            problems[t] = CheckIds(id, rs, batch, args_.num_rows[t], args_.hotness[t]);
          }
        } else {
          counts[t] = UniqueIds(id, n, uniques[t].get(), inverses[t]);
        }
      }
    });
    for (int t = 0; t < n_tables; ++t) {
      OP_REQUIRES(ctx, problems[t].empty(),
                  errors::InvalidArgument(TableLabel(args_.names, t), ": ", problems[t]));
    }
    for (int t = 0; t < n_tables; ++t) {
      Tensor* unique = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(t, TensorShape({counts[t]}), &unique));
      std::copy(uniques[t].get(), uniques[t].get() + counts[t], unique->flat<int64_t>().data());
    }
  }

 private:
  UniqueIdsArgs args_;
};

template <typename T>
class GatherRowsOp : public OpKernel {
 public:
  explicit GatherRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_names", &names_));
  }

  void Compute(OpKernelContext* ctx) override {
    const int n_tables = num_inputs() / 2;
    for (int t = 0; t < n_tables; ++t) {
      const std::string label = TableLabel(names_, t);
      tensorflow::core::RefCountPtr<tensorflow::Var> var;
      OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, t), &var));
      // Rows are read in place under a shared lock, as ResourceGather does: no dense copy of the
      // table, and the variable is not switched to copy-on-read mode.
      tensorflow::tf_shared_lock lock(*var->mu());
      OP_REQUIRES_OK(ctx, CheckTable<T>(var.get(), label));
      const Tensor& table = *var->tensor();
      const int64_t num_rows = table.dim_size(0);
      const int64_t dim = table.dim_size(1);
      const Tensor& indices_t = ctx->input(n_tables + t);
      const int64_t u = indices_t.NumElements();
      const int64_t* indices = indices_t.flat<int64_t>().data();
      for (int64_t i = 0; i < u; ++i) {
        OP_REQUIRES(ctx, indices[i] >= 0 && indices[i] < num_rows,
                    errors::InvalidArgument(label, ": row ", indices[i], " is out of range [0, ",
                                            num_rows, ")"));
      }
      Tensor* rows = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(t, TensorShape({u, dim}), &rows));
      const T* src = table.flat<T>().data();
      T* dst = rows->flat<T>().data();
      ParallelFor(ctx, u, 4 * dim, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          if (i + kPrefetchDistance < i1) {
            PrefetchBytes<0>(src + indices[i + kPrefetchDistance] * dim, dim * sizeof(T));
          }
          std::copy(src + indices[i] * dim, src + (indices[i] + 1) * dim, dst + i * dim);
        }
      });
    }
  }

 private:
  std::vector<std::string> names_;
};

template <typename T>
class SegmentCombineOp : public OpKernel {
 public:
  explicit SegmentCombineOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadCombiners(ctx, &combiners_));
  }

  void Compute(OpKernelContext* ctx) override {
    const int n_tables = num_inputs() / 4;
    OP_REQUIRES(ctx, static_cast<int>(combiners_.size()) == n_tables,
                errors::InvalidArgument("combiners need one entry per table"));
    for (int t = 0; t < n_tables; ++t) {
      const Tensor& rows = ctx->input(t);
      OP_REQUIRES_OK(ctx, RankInput(ctx, t, 2));
      Segments seg;
      if (!ReadSegments(ctx, n_tables, t, rows.dim_size(0), &seg)) return;
      const int64_t dim = rows.dim_size(1);
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(t, TensorShape({seg.batch, dim}), &out));
      std::vector<T> scale(seg.batch);
      const T* weights = static_cast<const T*>(seg.weights);
      const int64_t per_sample = (1 + seg.n / std::max<int64_t>(seg.batch, 1)) * (2 * dim + 4);
      const bool stream = out->TotalBytes() >= kStreamOutputBytes;
      ParallelFor(ctx, seg.batch, per_sample, [&](int64_t b0, int64_t b1) {
        SampleScales(seg.row_splits, weights, combiners_[t], b0, b1, scale.data());
        CombineForward(rows.flat<T>().data(), dim, seg.inverse, seg.row_splits, weights,
                       scale.data(), b0, b1, out->flat<T>().data(), stream);
      });
    }
  }

 private:
  std::vector<Combiner> combiners_;
};

template <typename T>
class SegmentCombineGradOp : public OpKernel {
 public:
  explicit SegmentCombineGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadCombiners(ctx, &combiners_));
  }

  void Compute(OpKernelContext* ctx) override {
    const int n_tables = num_inputs() / 5;
    OP_REQUIRES(ctx, static_cast<int>(combiners_.size()) == n_tables,
                errors::InvalidArgument("combiners need one entry per table"));
    for (int t = 0; t < n_tables; ++t) {
      const Tensor& grads = ctx->input(t);
      OP_REQUIRES_OK(ctx, RankInput(ctx, t, 2));
      int64_t num_unique = 0;
      OP_REQUIRES_OK(ctx, ScalarInput(ctx, 4 * n_tables + t, &num_unique));
      OP_REQUIRES(ctx, num_unique >= 0 && num_unique <= (int64_t{1} << 31),
                  errors::InvalidArgument(TableLabel({}, t), ": num_unique ", num_unique,
                                          " is out of range"));
      Segments seg;
      if (!ReadSegments(ctx, n_tables, t, num_unique, &seg)) return;
      OP_REQUIRES(ctx, grads.dim_size(0) == seg.batch,
                  errors::InvalidArgument(TableLabel({}, t), ": gradient has ", grads.dim_size(0),
                                          " rows for a batch of ", seg.batch));
      const int64_t dim = grads.dim_size(1);
      const T* weights = static_cast<const T*>(seg.weights);
      std::vector<T> scale(seg.batch);
      SampleScales(seg.row_splits, weights, combiners_[t], 0, seg.batch, scale.data());
      TensorShape out_shape;
      OP_REQUIRES_OK(ctx, SafeShape({num_unique, dim}, &out_shape));
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(t, out_shape, &out));
      if (num_unique == 0 || dim == 0) continue;
      // Blocks of (unique rows x 16-column slices): each task owns one block, so the scatter-add
      // needs no atomics and no sort. Column slices first (perfect balance), then row ranges
      // balanced by id count once there are more threads than slices. Half the pool's threads:
      // the scatter-add is bound by memory, and on 2 threads two blocks took 2.6x as long as
      // one (docs/benchmarks.md), while TF's other threads compete for the same cores.
      const int64_t threads =
          std::max(1, ctx->device()->tensorflow_cpu_worker_threads()->num_threads / 2);
      const int64_t col_blocks = std::min<int64_t>(threads, (dim + 15) / 16);
      const int64_t row_blocks =
          std::min<int64_t>((threads + col_blocks - 1) / col_blocks, num_unique);
      std::vector<int64_t> bounds(row_blocks + 1);
      BalancedUniqueRanges(seg.inverse, seg.n, num_unique, row_blocks, bounds.data());
      const T* g = grads.flat<T>().data();
      T* dst = out->flat<T>().data();
      const int64_t cost = seg.n * (2 * dim / col_blocks + 4);
      ParallelFor(ctx, row_blocks * col_blocks, cost, [&](int64_t b0, int64_t b1) {
        for (int64_t block = b0; block < b1; ++block) {
          const int64_t r = block / col_blocks, c = block % col_blocks;
          const int64_t d0 = dim * c / col_blocks, d1 = dim * (c + 1) / col_blocks;
          CombineBackwardBlock(g, dim, seg.inverse, seg.row_splits, seg.batch, weights,
                               scale.data(), bounds[r], bounds[r + 1], d0, d1, dst);
        }
      });
    }
  }

 private:
  std::vector<Combiner> combiners_;
};

REGISTER_KERNEL_BUILDER(Name("SokLiteRowSplitsFromRowIds").Device(DEVICE_CPU),
                        RowSplitsFromRowIdsOp);
REGISTER_KERNEL_BUILDER(Name("SokLiteUniqueIds").Device(DEVICE_CPU), UniqueIdsOp);

#define SOK_LITE_REGISTER_CPU(T)                                                                   \
  REGISTER_KERNEL_BUILDER(Name("SokLiteGatherRows").Device(DEVICE_CPU).TypeConstraint<T>("dtype"), \
                          GatherRowsOp<T>);                                                        \
  REGISTER_KERNEL_BUILDER(                                                                         \
      Name("SokLiteSegmentCombine").Device(DEVICE_CPU).TypeConstraint<T>("dtype"),                 \
      SegmentCombineOp<T>);                                                                        \
  REGISTER_KERNEL_BUILDER(                                                                         \
      Name("SokLiteSegmentCombineGrad").Device(DEVICE_CPU).TypeConstraint<T>("dtype"),             \
      SegmentCombineGradOp<T>);
SOK_LITE_REGISTER_CPU(float)
SOK_LITE_REGISTER_CPU(double)
#undef SOK_LITE_REGISTER_CPU

}  // namespace sok_lite
