// CPU kernels of the exchange family; message layouts in kernels/core/exchange.h.
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/core/exchange.h"
#include "kernels/core/prefetch.h"
#include "kernels/core/unique.h"
#include "kernels/tf/cpu_parallel.h"
#include "kernels/tf/dynamic_table.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/kernel_args.h"
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
using ::tensorflow::OpOutputList;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;

class PartitionByOwnerOp : public OpKernel {
 public:
  explicit PartitionByOwnerOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadOwners(ctx, &num_ranks_, &owners_));
  }

  void Compute(OpKernelContext* ctx) override {
    OpInputList unique;
    OP_REQUIRES_OK(ctx, ctx->input_list("unique_ids", &unique));
    const int64_t num_tables = unique.size();
    OP_REQUIRES(ctx, static_cast<int64_t>(owners_.size()) == num_tables,
                errors::InvalidArgument("localized_ranks needs one entry per table"));
    std::vector<const int64_t*> ids(num_tables);
    std::vector<int64_t> sizes(num_tables);
    int64_t total = 0;
    for (int64_t t = 0; t < num_tables; ++t) {
      ids[t] = unique[t].flat<int64_t>().data();
      sizes[t] = unique[t].NumElements();
      total += sizes[t];
      for (int64_t i = 0; i < sizes[t] && owners_[t].localized_rank != Owner::kHashed; ++i) {
        OP_REQUIRES(ctx, ids[t][i] >= 0,
                    errors::InvalidArgument("table ", t, ": negative id ", ids[t][i]));
      }
    }
    OP_REQUIRES(ctx, total < (int64_t{1} << 31),
                errors::InvalidArgument("more than 2^31 unique ids in one lookup"));
    OP_REQUIRES(
        ctx, num_ranks_ <= (int64_t{1} << 20) && num_tables <= (int64_t{1} << 20),
        errors::InvalidArgument("too many ranks or tables: ", num_ranks_, " x ", num_tables));
    Tensor *message, *splits, *counts, *send_pos;
    OP_REQUIRES_OK(
        ctx, ctx->allocate_output(0, TensorShape({num_ranks_ * num_tables + total}), &message));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({num_ranks_}), &splits));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({num_ranks_ * num_tables}), &counts));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({total}), &send_pos));
    PartitionByOwner(ids, sizes, owners_, num_ranks_, counts->flat<int64_t>().data(),
                     message->flat<int64_t>().data(), splits->flat<int64_t>().data(),
                     send_pos->flat<int32_t>().data());
  }

 private:
  int64_t num_ranks_ = 1;
  std::vector<Owner> owners_;
};

// Parses the id message at inputs (first, first + 1) into `parsed`.
bool ParseMessageInputs(OpKernelContext* ctx, int first, int64_t num_tables, ParsedIds* parsed) {
  const Tensor& message = ctx->input(first);
  const Tensor& splits = ctx->input(first + 1);
  const std::string problem =
      ParseIdMessage(message.flat<int64_t>().data(), message.NumElements(),
                     splits.flat<int64_t>().data(), splits.NumElements(), num_tables, parsed);
  if (!problem.empty()) {
    ctx->CtxFailure(errors::InvalidArgument(problem));
    return false;
  }
  return true;
}

template <typename T>
class GatherForPeersOp : public OpKernel {
 public:
  explicit GatherForPeersOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_names", &names_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dims", &dims_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dynamic", &dynamic_));
  }

  void Compute(OpKernelContext* ctx) override {
    const int num_tables = num_inputs() - 2;
    const int64_t num_ranks = ctx->input(num_tables + 1).NumElements();
    ParsedIds parsed;
    if (!ParseMessageInputs(ctx, num_tables, num_tables, &parsed)) return;
    const int64_t* message = ctx->input(num_tables).flat<int64_t>().data();

    std::vector<tensorflow::core::RefCountPtr<tensorflow::Var>> vars(num_tables);
    const std::vector<int64_t>& dims = dims_;
    OP_REQUIRES_OK(ctx, CheckDims(dims, num_tables));
    OP_REQUIRES(ctx, static_cast<int>(dynamic_.size()) == num_tables,
                errors::InvalidArgument("dynamic needs one entry per table"));
    for (int t = 0; t < num_tables; ++t) {
      if (!dynamic_[t]) OP_REQUIRES_OK(ctx, LookupResource(ctx, HandleFromInput(ctx, t), &vars[t]));
    }
    std::vector<int64_t> offsets;
    VectorOffsets(parsed.count, dims, num_ranks, &offsets);
    Tensor *vectors, *vector_splits;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({offsets.back()}), &vectors));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({num_ranks}), &vector_splits));
    for (int64_t r = 0; r < num_ranks; ++r) {
      vector_splits->flat<int64_t>()(r) = offsets[(r + 1) * num_tables] - offsets[r * num_tables];
    }
    T* out = vectors->flat<T>().data();
    for (int t = 0; t < num_tables; ++t) {
      if (dynamic_[t]) {
        OP_REQUIRES_OK(ctx, AnswerFromHashTable(ctx, t, message, parsed, offsets, num_ranks, out));
        continue;
      }
      // Rows are read in place under the variable's shared lock, one table at a time.
      tensorflow::tf_shared_lock lock(*vars[t]->mu());
      OP_REQUIRES_OK(ctx, CheckTable<T>(vars[t].get(), TableLabel(names_, t)));
      const Tensor& table = *vars[t]->tensor();
      OP_REQUIRES(ctx, table.dim_size(1) == dims[t],
                  errors::InvalidArgument(TableLabel(names_, t), ": rows have ", table.dim_size(1),
                                          " columns, expected ", dims[t]));
      const int64_t rows = table.dim_size(0), dim = dims[t];
      const T* src = table.flat<T>().data();
      for (int64_t r = 0; r < num_ranks; ++r) {
        const int64_t seg = r * num_tables + t;
        const int64_t* ids = message + parsed.begin[seg];
        for (int64_t j = 0; j < parsed.count[seg]; ++j) {
          OP_REQUIRES(ctx, ids[j] >= 0 && ids[j] < rows,
                      errors::InvalidArgument(TableLabel(names_, t), ": rank ", r,
                                              " asked for local row ", ids[j], " of ", rows));
        }
        T* dst = out + offsets[seg];
        ParallelFor(ctx, parsed.count[seg], 4 * dim, [&](int64_t j0, int64_t j1) {
          for (int64_t j = j0; j < j1; ++j) {
            if (j + kPrefetchDistance < j1) {
              PrefetchBytes<0>(src + ids[j + kPrefetchDistance] * dim, dim * sizeof(T));
            }
            std::copy(src + ids[j] * dim, src + (ids[j] + 1) * dim, dst + j * dim);
          }
        });
      }
    }
  }

 private:
  // Hash tables: every rank's keys of table t in one lookup step (finding or creating rows),
  // written to each requester's place in the vector message.
  absl::Status AnswerFromHashTable(OpKernelContext* ctx, int t, const int64_t* message,
                                   const ParsedIds& parsed, const std::vector<int64_t>& offsets,
                                   int64_t num_ranks, T* out) {
    if constexpr (!std::is_same_v<T, float>) {
      return errors::InvalidArgument(TableLabel(names_, t), ": hash tables hold float32 rows");
    } else {
      tensorflow::core::RefCountPtr<DynamicTableResource> table;
      TF_RETURN_IF_ERROR(LookupResource(ctx, HandleFromInput(ctx, t), &table));
      const int64_t num_tables = dims_.size(), dim = dims_[t];
      std::vector<int64_t> keys;
      for (int64_t r = 0; r < num_ranks; ++r) {
        const int64_t seg = r * num_tables + t;
        keys.insert(keys.end(), message + parsed.begin[seg],
                    message + parsed.begin[seg] + parsed.count[seg]);
      }
      std::vector<int64_t> unique(keys.size());
      std::vector<int32_t> inverse(keys.size());
      const int64_t u = UniqueIds(keys.data(), keys.size(), unique.data(), inverse.data());
      std::vector<float> rows(u * dim);
      {
        tensorflow::mutex_lock lock(table->mu);
        if (table->table.config().dim != dim) {
          return errors::InvalidArgument(TableLabel(names_, t), ": dimension mismatch");
        }
        const HashTable::Runner run = [ctx](int64_t total,
                                            const std::function<void(int64_t, int64_t)>& fn) {
          ParallelFor(ctx, total, 2000, fn);
        };
        const std::string problem = table->table.Lookup(unique.data(), u, rows.data(), run);
        if (!problem.empty()) return errors::InvalidArgument(TableLabel(names_, t), ": ", problem);
      }
      int64_t k = 0;
      for (int64_t r = 0; r < num_ranks; ++r) {
        const int64_t seg = r * num_tables + t;
        for (int64_t j = 0; j < parsed.count[seg]; ++j, ++k) {
          std::copy_n(rows.data() + static_cast<int64_t>(inverse[k]) * dim, dim,
                      out + offsets[seg] + j * dim);
        }
      }
      return absl::OkStatus();
    }
  }

  std::vector<std::string> names_;
  std::vector<int64_t> dims_;
  std::vector<bool> dynamic_;
};

// Checks the counts / send_pos inputs of unpack and pack against the per-table sizes and returns
// the vector-message offsets.
bool CheckLayout(OpKernelContext* ctx, const Tensor& counts, const Tensor& send_pos,
                 const std::vector<int64_t>& dims, std::vector<int64_t>* num_unique,
                 std::vector<int64_t>* offsets) {
  const int64_t num_tables = dims.size();
  if (num_tables == 0) {
    ctx->CtxFailure(errors::InvalidArgument("dims must name at least one table"));
    return false;
  }
  if (counts.NumElements() % num_tables != 0) {
    ctx->CtxFailure(errors::InvalidArgument("counts size is not a multiple of the table count"));
    return false;
  }
  const int64_t num_ranks = counts.NumElements() / num_tables;
  const auto c = counts.flat<int64_t>();
  std::vector<int64_t> count(c.data(), c.data() + c.size());
  num_unique->assign(num_tables, 0);
  int64_t total = 0;
  for (int64_t s = 0; s < num_ranks * num_tables; ++s) {
    if (count[s] < 0 || count[s] > (int64_t{1} << 40)) {
      ctx->CtxFailure(errors::InvalidArgument("count ", count[s], " is out of range"));
      return false;
    }
    (*num_unique)[s % num_tables] += count[s];
    total += count[s];
  }
  if (send_pos.NumElements() != total) {
    ctx->CtxFailure(errors::InvalidArgument("send_pos has ", send_pos.NumElements(),
                                            " entries for ", total, " ids"));
    return false;
  }
  VectorOffsets(count, dims, num_ranks, offsets);
  const int32_t* pos = send_pos.flat<int32_t>().data();
  int64_t p = 0;
  for (int64_t s = 0; s < num_ranks * num_tables; ++s) {
    for (int64_t j = 0; j < count[s]; ++j, ++p) {
      if (pos[p] < 0 || pos[p] >= (*num_unique)[s % num_tables]) {
        ctx->CtxFailure(errors::InvalidArgument("send_pos ", pos[p], " out of range"));
        return false;
      }
    }
  }
  return true;
}

template <typename T>
class UnpackRowsOp : public OpKernel {
 public:
  explicit UnpackRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dims", &dims_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& vectors = ctx->input(0);
    const Tensor& counts = ctx->input(1);
    const Tensor& send_pos = ctx->input(2);
    OP_REQUIRES_OK(ctx, CheckDims(dims_, num_outputs()));
    std::vector<int64_t> num_unique, offsets;
    if (!CheckLayout(ctx, counts, send_pos, dims_, &num_unique, &offsets)) return;
    OP_REQUIRES(ctx, vectors.NumElements() == offsets.back(),
                errors::InvalidArgument("vector message has ", vectors.NumElements(),
                                        " elements, expected ", offsets.back()));
    const int64_t num_tables = dims_.size();
    std::vector<T*> rows(num_tables);
    for (int64_t t = 0; t < num_tables; ++t) {
      TensorShape shape;
      OP_REQUIRES_OK(ctx, SafeShape({num_unique[t], dims_[t]}, &shape));
      Tensor* out;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(t, shape, &out));
      rows[t] = out->flat<T>().data();
      std::fill(rows[t], rows[t] + out->NumElements(), T(0));
    }
    const T* src = vectors.flat<T>().data();
    const int32_t* pos = send_pos.flat<int32_t>().data();
    const int64_t* count = counts.flat<int64_t>().data();
    for (int64_t s = 0, p = 0; s < counts.NumElements(); ++s) {
      const int64_t t = s % num_tables, dim = dims_[t];
      for (int64_t j = 0; j < count[s]; ++j, ++p) {
        const T* from = src + offsets[s] + j * dim;
        std::copy(from, from + dim, rows[t] + static_cast<int64_t>(pos[p]) * dim);
      }
    }
  }

 private:
  std::vector<int64_t> dims_;
};

template <typename T>
class PackRowsOp : public OpKernel {
 public:
  explicit PackRowsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    OpInputList rows;
    OP_REQUIRES_OK(ctx, ctx->input_list("rows", &rows));
    const Tensor& counts = ctx->input(rows.size());
    const Tensor& send_pos = ctx->input(rows.size() + 1);
    std::vector<int64_t> dims;
    OP_REQUIRES_OK(ctx, RowWidths(rows, &dims));
    std::vector<int64_t> num_unique, offsets;
    if (!CheckLayout(ctx, counts, send_pos, dims, &num_unique, &offsets)) return;
    OP_REQUIRES_OK(ctx, CheckRowCounts(rows, num_unique));
    Tensor* vectors;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({offsets.back()}), &vectors));
    T* dst = vectors->flat<T>().data();
    const int32_t* pos = send_pos.flat<int32_t>().data();
    const int64_t* count = counts.flat<int64_t>().data();
    const int64_t num_tables = dims.size();
    for (int64_t s = 0, p = 0; s < counts.NumElements(); ++s) {
      const int64_t t = s % num_tables, dim = dims[t];
      const T* src = rows[t].flat<T>().data();
      for (int64_t j = 0; j < count[s]; ++j, ++p) {
        const T* from = src + static_cast<int64_t>(pos[p]) * dim;
        std::copy(from, from + dim, dst + offsets[s] + j * dim);
      }
    }
  }
};

template <typename T>
class ReduceForOwnerOp : public OpKernel {
 public:
  explicit ReduceForOwnerOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dims", &dims_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& grads = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckDims(dims_, num_outputs() / 2));
    OP_REQUIRES(ctx, !dims_.empty(), errors::InvalidArgument("dims must name a table"));
    const int64_t num_tables = dims_.size();
    const int64_t num_ranks = ctx->input(2).NumElements();
    ParsedIds parsed;
    if (!ParseMessageInputs(ctx, 1, num_tables, &parsed)) return;
    std::vector<int64_t> offsets;
    VectorOffsets(parsed.count, dims_, num_ranks, &offsets);
    OP_REQUIRES(ctx, grads.NumElements() == offsets.back(),
                errors::InvalidArgument("gradient message has ", grads.NumElements(),
                                        " elements, expected ", offsets.back()));
    const int64_t* message = ctx->input(1).flat<int64_t>().data();
    const T* g = grads.flat<T>().data();
    for (int64_t t = 0; t < num_tables; ++t) {
      const int64_t dim = dims_[t];
      // Every (rank, id) request of this table, then one summed row per distinct local row.
      std::vector<int64_t> requested;
      std::vector<const T*> sources;
      for (int64_t r = 0; r < num_ranks; ++r) {
        const int64_t seg = r * num_tables + t;
        for (int64_t j = 0; j < parsed.count[seg]; ++j) {
          requested.push_back(message[parsed.begin[seg] + j]);
          sources.push_back(g + offsets[seg] + j * dim);
        }
      }
      std::vector<int64_t> distinct(requested.size());
      std::vector<int32_t> inverse(requested.size());
      const int64_t v =
          UniqueIds(requested.data(), requested.size(), distinct.data(), inverse.data());
      Tensor *rows, *values;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(t, TensorShape({v}), &rows));
      OP_REQUIRES_OK(ctx, ctx->allocate_output(num_tables + t, TensorShape({v, dim}), &values));
      std::copy(distinct.begin(), distinct.begin() + v, rows->flat<int64_t>().data());
      T* out = values->flat<T>().data();
      std::fill(out, out + v * dim, T(0));
      for (size_t k = 0; k < requested.size(); ++k) {
        T* dst = out + static_cast<int64_t>(inverse[k]) * dim;
        for (int64_t d = 0; d < dim; ++d) dst[d] += sources[k][d];
      }
    }
  }

 private:
  std::vector<int64_t> dims_;
};

REGISTER_KERNEL_BUILDER(Name("SokLitePartitionByOwner").Device(DEVICE_CPU), PartitionByOwnerOp);

#define SOK_LITE_REGISTER_CPU(T)                                                                   \
  REGISTER_KERNEL_BUILDER(                                                                         \
      Name("SokLiteGatherForPeers").Device(DEVICE_CPU).TypeConstraint<T>("dtype"),                 \
      GatherForPeersOp<T>);                                                                        \
  REGISTER_KERNEL_BUILDER(Name("SokLiteUnpackRows").Device(DEVICE_CPU).TypeConstraint<T>("dtype"), \
                          UnpackRowsOp<T>);                                                        \
  REGISTER_KERNEL_BUILDER(Name("SokLitePackRows").Device(DEVICE_CPU).TypeConstraint<T>("dtype"),   \
                          PackRowsOp<T>);                                                          \
  REGISTER_KERNEL_BUILDER(                                                                         \
      Name("SokLiteReduceForOwner").Device(DEVICE_CPU).TypeConstraint<T>("dtype"),                 \
      ReduceForOwnerOp<T>);
SOK_LITE_REGISTER_CPU(float)
SOK_LITE_REGISTER_CPU(double)
#undef SOK_LITE_REGISTER_CPU

}  // namespace sok_lite
