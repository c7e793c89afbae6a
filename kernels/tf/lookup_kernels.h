// The kernels of the lookup family (ops in lookup_ops.cc), one class per op for both devices:
// attribute reads, input checks, output allocation and error texts live here once. The
// arithmetic and the checks that read device memory go through the functors declared below,
// defined for CPUDevice in lookup_kernels.cc and for GPUDevice in kernels/tf_gpu.
#ifndef SOK_LITE_KERNELS_TF_LOOKUP_KERNELS_H_
#define SOK_LITE_KERNELS_TF_LOOKUP_KERNELS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/lookup_combine.h"
#include "kernels/core/lookup_validate.h"
#include "kernels/tf/device.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/kernel_args.h"
#include "kernels/tf/table_dtype.h"
#include "kernels/tf/table_memory.h"
#include "kernels/tf/table_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"

namespace sok_lite {

// The flat input index of entry t of input `name` (a list, or t = 0): input_checks.h names inputs
// by index in its messages.
inline absl::Status LookupInputIndex(tensorflow::OpKernelContext* ctx, absl::string_view name,
                                     int t, int* index) {
  int start = 0, stop = 0;
  TF_RETURN_IF_ERROR(ctx->op_kernel().InputRange(name, &start, &stop));
  *index = start + t;
  return absl::OkStatus();
}

// The tables of one SokLiteUniqueIds call: inputs, and what UniqueIdsFunctor finds.
struct UniqueIdsTables {
  tensorflow::OpInputList ids, row_splits;
  std::vector<int32_t*> inverse;      // outputs: the position of each id among the unique ids
  std::vector<std::string> problems;  // "" or table t's first problem
  std::vector<int64_t> counts;        // table t's number of unique ids
};

// Run checks and deduplicates every table's ids into scratch (on the GPU with one wait for all
// tables); CopyUnique(ctx, t, out) then writes table t's counts[t] unique ids to out.
template <typename Device>
class UniqueIdsFunctor;

// The first of u indices outside [0, num_rows): *found, its position and its value.
template <typename Device>
struct GatherIndexCheck {
  static absl::Status Run(tensorflow::OpKernelContext* ctx, const int64_t* indices, int64_t u,
                          int64_t num_rows, bool* found, int64_t* position, int64_t* value);
};

// rows[i, :] = table[indices[i], :] for i < u (indices checked), converted from the table's
// storage type (a 16-bit table's rows are widened to float32).
template <typename Device, typename T, typename Stored = T>
struct GatherRowsFunctor {
  static absl::Status Compute(tensorflow::OpKernelContext* ctx, const Stored* table, int64_t dim,
                              const int64_t* indices, int64_t u, T* rows);
};

// One table's ragged segments, in the op's device memory.
struct CombineSegments {
  const int32_t* inverse = nullptr;
  const int64_t* row_splits = nullptr;
  const void* weights = nullptr;  // null: every weight is 1
  int64_t n = 0;
  int64_t batch = 0;
};

// Checks row_splits and inverse (against num_unique rows): *problem gets "" or the first
// problem, in core/lookup_validate.h's words.
template <typename Device>
struct CombineSegmentChecks {
  static absl::Status Run(tensorflow::OpKernelContext* ctx, const CombineSegments& seg,
                          int64_t num_unique, std::string* problem);
};

// One table of a segment-combine gradient: the upstream gradient [batch, dim], the segments,
// and the output [num_unique, dim].
template <typename T>
struct CombineGradTable {
  const T* grads;
  int64_t dim;
  CombineSegments seg;
  Combiner combiner;
  int64_t num_unique;
  tensorflow::Tensor* out;
};

// Forward: out [batch, dim] = per-sample combine of rows [num_unique, dim] (batch, dim > 0).
// Backward: out [num_unique, dim] = one summed gradient row per unique id of grads [batch, dim]
// (num_unique, dim > 0; batch may be 0, the rows are then zeros).
template <typename Device, typename T>
struct SegmentCombineFunctor {
  static absl::Status Forward(tensorflow::OpKernelContext* ctx, const T* rows, int64_t dim,
                              const CombineSegments& seg, Combiner combiner,
                              tensorflow::Tensor* out);
  // Every table of one op at once (checked and allocated; tables without rows or columns left
  // out), so that small tables can run side by side.
  static absl::Status Backward(tensorflow::OpKernelContext* ctx,
                               const std::vector<CombineGradTable<T>>& tables);
};

// Every argument lives in host memory on both devices (the row ids are scanned once, in order,
// and the splits are small), so both run the same core scan.
template <typename Device>
class RowSplitsFromRowIdsOp : public tensorflow::OpKernel {
 public:
  explicit RowSplitsFromRowIdsOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_name", &name_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor* row_ids = nullptr;
    OP_REQUIRES_OK(ctx, ctx->input("row_ids", &row_ids));
    int nrows_index = 0;
    OP_REQUIRES_OK(ctx, LookupInputIndex(ctx, "nrows", 0, &nrows_index));
    int64_t nrows = 0;
    OP_REQUIRES_OK(ctx, ScalarInput(ctx, nrows_index, &nrows));
    OP_REQUIRES(
        ctx, nrows >= 0 && nrows < (int64_t{1} << 48),
        tensorflow::errors::InvalidArgument(name_, ": batch size ", nrows, " is out of range"));
    tensorflow::Tensor* splits = nullptr;
    OP_REQUIRES_OK(
        ctx, ctx->allocate_output("row_splits", tensorflow::TensorShape({nrows + 1}), &splits));
    const std::string problem =
        RowSplitsFromRowIds(row_ids->flat<int64_t>().data(), row_ids->NumElements(), nrows,
                            splits->flat<int64_t>().data());
    OP_REQUIRES(ctx, problem.empty(),
                tensorflow::errors::InvalidArgument(name_, ": sp_ids ", problem));
  }

 private:
  std::string name_;
};

template <typename Device>
class UniqueIdsOp : public tensorflow::OpKernel {
 public:
  explicit UniqueIdsOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, args_.Read(ctx));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    UniqueIdsTables tables;
    OP_REQUIRES_OK(ctx, ctx->input_list("ids", &tables.ids));
    OP_REQUIRES_OK(ctx, ctx->input_list("row_splits", &tables.row_splits));
    tensorflow::OpOutputList unique_out, inverse_out;
    OP_REQUIRES_OK(ctx, ctx->output_list("unique_ids", &unique_out));
    OP_REQUIRES_OK(ctx, ctx->output_list("inverse", &inverse_out));
    const int n_tables = tables.ids.size();
    for (int t = 0; t < n_tables; ++t) {
      OP_REQUIRES(
          ctx, tables.ids[t].NumElements() < (int64_t{1} << 31),
          tensorflow::errors::InvalidArgument(TableLabel(args_.names, t), ": more than 2^31 ids"));
      OP_REQUIRES(ctx, tables.row_splits[t].NumElements() >= 1,
                  tensorflow::errors::InvalidArgument(TableLabel(args_.names, t),
                                                      ": row_splits must have at least 1 entry"));
    }
    for (int t = 0; t < n_tables; ++t) {
      tensorflow::Tensor* inverse = nullptr;
      OP_REQUIRES_OK(ctx, inverse_out.allocate(t, tables.ids[t].shape(), &inverse));
      tables.inverse.push_back(inverse->flat<int32_t>().data());
    }
    tables.problems.resize(n_tables);
    tables.counts.resize(n_tables);
    UniqueIdsFunctor<Device> unique;
    OP_REQUIRES_OK(ctx, unique.Run(ctx, args_, &tables));
    for (int t = 0; t < n_tables; ++t) {
      OP_REQUIRES(ctx, tables.problems[t].empty(),
                  tensorflow::errors::InvalidArgument(TableLabel(args_.names, t), ": ",
                                                      tables.problems[t]));
    }
    for (int t = 0; t < n_tables; ++t) {
      const int64_t count = tables.counts[t];
      tensorflow::Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, unique_out.allocate(t, tensorflow::TensorShape({count}), &out));
      if (count == 0) continue;
      OP_REQUIRES_OK(ctx, unique.CopyUnique(ctx, t, count, out->flat<int64_t>().data()));
    }
  }

 private:
  UniqueIdsArgs args_;
};

// Rows of T from tables of T, or (T = float) from 16-bit tables, widened as they are read.
template <typename Device, typename T>
class GatherRowsOp : public tensorflow::OpKernel {
 public:
  explicit GatherRowsOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_names", &names_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("per_sample", &per_sample_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    tensorflow::OpInputList handles, indices;
    OP_REQUIRES_OK(ctx, ctx->input_list("handles", &handles));
    OP_REQUIRES_OK(ctx, ctx->input_list("indices", &indices));
    tensorflow::OpOutputList rows_out;
    OP_REQUIRES_OK(ctx, ctx->output_list("rows", &rows_out));
    // Every table (kind, dtype, shape) before any indices, even empty ones.
    std::vector<tensorflow::core::RefCountPtr<tensorflow::Var>> vars(handles.size());
    for (int t = 0; t < handles.size(); ++t) {
      const std::string label = TableLabel(names_, t);
      OP_REQUIRES_OK(
          ctx, LookupResource(ctx, handles[t].flat<tensorflow::ResourceHandle>()(0), &vars[t]));
      tensorflow::tf_shared_lock lock(*vars[t]->mu());
      OP_REQUIRES_OK(ctx, ForTableType<Device, T>(vars[t]->tensor()->dtype(), label,
                                                  [&](auto stored) -> absl::Status {
                                                    using Stored = typename decltype(stored)::type;
                                                    return CheckTable<Stored>(vars[t].get(), label);
                                                  }));
    }
    for (int t = 0; t < handles.size(); ++t) {
      const std::string label = TableLabel(names_, t);
      tensorflow::Var* var = vars[t].get();
      // Rows are read in place under a shared lock, as ResourceGather does: no dense copy of the
      // table, and the variable is not switched to copy-on-read mode. Later writers on the GPU
      // run on the same stream.
      tensorflow::tf_shared_lock lock(*var->mu());
      OP_REQUIRES_OK(
          ctx,
          ForTableType<Device, T>(var->tensor()->dtype(), label, [&](auto stored) -> absl::Status {
            using Stored = typename decltype(stored)::type;
            return Gather<Stored>(ctx, var, indices[t], label, t, per_sample_, &rows_out);
          }));
    }
  }

 private:
  template <typename Stored>
  static absl::Status Gather(tensorflow::OpKernelContext* ctx, tensorflow::Var* var,
                             const tensorflow::Tensor& indices, const std::string& label, int t,
                             bool per_sample, tensorflow::OpOutputList* rows_out) {
    TF_RETURN_IF_ERROR(CheckTable<Stored>(var, label));
    const tensorflow::Tensor& table = *var->tensor();
    const int64_t num_rows = table.dim_size(0), dim = table.dim_size(1);
    const int64_t u = indices.NumElements();
    const int64_t* idx = indices.flat<int64_t>().data();
    bool found = false;
    int64_t position = 0, bad = 0;
    TF_RETURN_IF_ERROR(
        GatherIndexCheck<Device>::Run(ctx, idx, u, num_rows, &found, &position, &bad));
    if (found && per_sample) {  // worded as the lookup's id check (CheckIds) words it
      return tensorflow::errors::InvalidArgument(label, ": id ", bad, " of sample ", position,
                                                 " is out of range [0, ", num_rows, ")");
    }
    if (found) {
      return tensorflow::errors::InvalidArgument(label, ": row ", bad, " is out of range [0, ",
                                                 num_rows, ")");
    }
    tensorflow::Tensor* rows = nullptr;
    TF_RETURN_IF_ERROR(rows_out->allocate(t, tensorflow::TensorShape({u, dim}), &rows));
    if (u == 0 || dim == 0) return absl::OkStatus();
    TableMemory<Device>::PrepareRandomRows(table);
    return GatherRowsFunctor<Device, T, Stored>::Compute(ctx, table.flat<Stored>().data(), dim, idx,
                                                         u, rows->flat<T>().data());
  }

  std::vector<std::string> names_;
  bool per_sample_ = false;  // indices are the ids of samples of one id each
};

// The inputs and outputs of a segment-combine op: `values` (rows, or grads) and the segments.
struct CombineInputs {
  tensorflow::OpInputList values, inverse, row_splits, weights;
  tensorflow::OpOutputList outputs;

  absl::Status Read(tensorflow::OpKernelContext* ctx, const char* values_name,
                    const char* outputs_name, const std::vector<Combiner>& combiners) {
    TF_RETURN_IF_ERROR(ctx->input_list(values_name, &values));
    TF_RETURN_IF_ERROR(ctx->input_list("inverse", &inverse));
    TF_RETURN_IF_ERROR(ctx->input_list("row_splits", &row_splits));
    TF_RETURN_IF_ERROR(ctx->input_list("weights", &weights));
    TF_RETURN_IF_ERROR(ctx->output_list(outputs_name, &outputs));
    if (static_cast<int>(combiners.size()) != values.size()) {
      return tensorflow::errors::InvalidArgument("combiners need one entry per table");
    }
    return absl::OkStatus();
  }

  // Table t's segments, checked against num_unique rows.
  template <typename Device>
  absl::Status Table(tensorflow::OpKernelContext* ctx, int t, int64_t num_unique,
                     CombineSegments* seg) const {
    const std::string label = TableLabel({}, t);
    if (row_splits[t].NumElements() < 1) {
      return tensorflow::errors::InvalidArgument(label, ": row_splits must have at least 1 entry");
    }
    seg->inverse = inverse[t].flat<int32_t>().data();
    seg->row_splits = row_splits[t].flat<int64_t>().data();
    seg->n = inverse[t].NumElements();
    seg->batch = row_splits[t].NumElements() - 1;
    std::string problem;
    TF_RETURN_IF_ERROR(CombineSegmentChecks<Device>::Run(ctx, *seg, num_unique, &problem));
    const int64_t w = weights[t].NumElements();
    if (problem.empty() && w != 0 && w != seg->n) {
      problem =
          "weights have " + std::to_string(w) + " entries for " + std::to_string(seg->n) + " ids";
    }
    if (!problem.empty()) return tensorflow::errors::InvalidArgument(label, ": ", problem);
    seg->weights = w == 0 ? nullptr : weights[t].data();
    return absl::OkStatus();
  }
};

// Checks that entry t of list input `name` is 2-D ([rows, dim]).
inline absl::Status LookupMatrixInput(tensorflow::OpKernelContext* ctx, const char* name, int t) {
  int index = 0;
  TF_RETURN_IF_ERROR(LookupInputIndex(ctx, name, t, &index));
  return RankInput(ctx, index, 2);
}

template <typename Device, typename T>
class SegmentCombineOp : public tensorflow::OpKernel {
 public:
  explicit SegmentCombineOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadCombiners(ctx, &combiners_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    CombineInputs in;
    OP_REQUIRES_OK(ctx, in.Read(ctx, "rows", "embeddings", combiners_));
    const tensorflow::OpInputList& rows = in.values;
    for (int t = 0; t < rows.size(); ++t) {
      OP_REQUIRES_OK(ctx, LookupMatrixInput(ctx, "rows", t));
      CombineSegments seg;
      OP_REQUIRES_OK(ctx, in.Table<Device>(ctx, t, rows[t].dim_size(0), &seg));
      const int64_t dim = rows[t].dim_size(1);
      tensorflow::Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, in.outputs.allocate(t, tensorflow::TensorShape({seg.batch, dim}), &out));
      if (seg.batch == 0 || dim == 0) continue;
      OP_REQUIRES_OK(ctx, (SegmentCombineFunctor<Device, T>::Forward(
                              ctx, rows[t].flat<T>().data(), dim, seg, combiners_[t], out)));
    }
  }

 private:
  std::vector<Combiner> combiners_;
};

template <typename Device, typename T>
class SegmentCombineGradOp : public tensorflow::OpKernel {
 public:
  explicit SegmentCombineGradOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadCombiners(ctx, &combiners_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    CombineInputs in;
    OP_REQUIRES_OK(ctx, in.Read(ctx, "grads", "row_grads", combiners_));
    const tensorflow::OpInputList& grads = in.values;
    std::vector<CombineGradTable<T>> tables;
    for (int t = 0; t < grads.size(); ++t) {
      OP_REQUIRES_OK(ctx, LookupMatrixInput(ctx, "grads", t));
      int num_unique_index = 0;
      OP_REQUIRES_OK(ctx, LookupInputIndex(ctx, "num_unique", t, &num_unique_index));
      int64_t num_unique = 0;
      OP_REQUIRES_OK(ctx, ScalarInput(ctx, num_unique_index, &num_unique));  // host memory
      OP_REQUIRES(ctx, num_unique >= 0 && num_unique <= (int64_t{1} << 31),
                  tensorflow::errors::InvalidArgument(TableLabel({}, t), ": num_unique ",
                                                      num_unique, " is out of range"));
      CombineSegments seg;
      OP_REQUIRES_OK(ctx, in.Table<Device>(ctx, t, num_unique, &seg));
      OP_REQUIRES(ctx, grads[t].dim_size(0) == seg.batch,
                  tensorflow::errors::InvalidArgument(TableLabel({}, t), ": gradient has ",
                                                      grads[t].dim_size(0), " rows for a batch of ",
                                                      seg.batch));
      const int64_t dim = grads[t].dim_size(1);
      tensorflow::TensorShape out_shape;
      OP_REQUIRES_OK(ctx, SafeShape({num_unique, dim}, &out_shape));
      tensorflow::Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, in.outputs.allocate(t, out_shape, &out));
      if (num_unique == 0 || dim == 0) continue;
      tables.push_back({grads[t].flat<T>().data(), dim, seg, combiners_[t], num_unique, out});
    }
    if (!tables.empty())
      OP_REQUIRES_OK(ctx, (SegmentCombineFunctor<Device, T>::Backward(ctx, tables)));
  }

 private:
  std::vector<Combiner> combiners_;
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_LOOKUP_KERNELS_H_
