// The exchange family's kernels, one class per op templated on the device (kernels/tf/device.h):
// attribute reads, input checks, output allocation and error texts live here once. Each device
// defines the functors below (CPUDevice in exchange_kernels.cc, GPUDevice in
// kernels/tf_gpu/exchange_*_gpu.cc); message layouts in kernels/core/exchange.h.
#ifndef SOK_LITE_KERNELS_TF_EXCHANGE_KERNELS_H_
#define SOK_LITE_KERNELS_TF_EXCHANGE_KERNELS_H_

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/core/exchange.h"
#include "kernels/tf/device.h"
#include "kernels/tf/input_checks.h"
#include "kernels/tf/kernel_args.h"
#include "kernels/tf/table_dtype.h"
#include "kernels/tf/table_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"

namespace sok_lite {

// ---- Functors, defined per device (the GPU ones for float only, as its registrations say). ----

template <typename Device>
struct PartitionByOwnerFunctor {
  // The first table (not hashed) holding a negative id: *table = its index and *id = the first
  // such id, or *table = -1.
  static absl::Status FindNegativeId(tensorflow::OpKernelContext* ctx,
                                     const std::vector<const int64_t*>& ids,
                                     const std::vector<int64_t>& sizes,
                                     const std::vector<Owner>& owners, int64_t* table, int64_t* id);
  // Fills the four outputs (core PartitionByOwner's layout).
  static absl::Status Compute(tensorflow::OpKernelContext* ctx,
                              const std::vector<const int64_t*>& ids,
                              const std::vector<int64_t>& sizes, const std::vector<Owner>& owners,
                              int64_t num_ranks, int64_t* counts, int64_t* message, int64_t* splits,
                              int32_t* send_pos);
};

// Parses the received id message at inputs (first, first + 1): the message and its splits.
template <typename Device>
struct IdMessageParser {
  static absl::Status Parse(tensorflow::OpKernelContext* ctx, int first, int64_t num_tables,
                            ParsedIds* parsed);
};

// The tables SokLiteGatherForPeers answers from.
struct PeerTables {
  const std::vector<std::string>& names;
  const std::vector<int64_t>& dims;
  const std::vector<bool>& dynamic;  // per table: a hash table rather than a variable
  std::vector<tensorflow::core::RefCountPtr<tensorflow::Var>> vars;  // null for hash tables
  std::string Label(int t) const { return TableLabel(names, t); }
};

// Under the variable's lock: static table t holds initialized [rows, dims[t]] values of T.
template <typename T>
absl::Status CheckPeerTable(const PeerTables& tables, int t) {
  TF_RETURN_IF_ERROR(CheckTable<T>(tables.vars[t].get(), tables.Label(t)));
  const int64_t cols = tables.vars[t]->tensor()->dim_size(1);
  if (cols != tables.dims[t]) {
    return tensorflow::errors::InvalidArgument(tables.Label(t), ": rows have ", cols,
                                               " columns, expected ", tables.dims[t]);
  }
  return absl::OkStatus();
}

// The first request (table by table, then rank by rank) for a row a static table lacks.
struct BadRowRequest {
  int table = -1;  // -1: none
  int64_t rank = 0, row = 0, rows = 0;
};

template <typename Device>
struct GatherForPeersFunctor {
  // Writes every requested row to out + offsets[r * T + t]. Stops at the first problem: a
  // failed status, or OK with *bad naming a request out of range.
  template <typename T>
  static absl::Status Compute(tensorflow::OpKernelContext* ctx, const PeerTables& tables,
                              const int64_t* message, const ParsedIds& parsed,
                              const std::vector<int64_t>& offsets, int64_t num_ranks, T* out,
                              BadRowRequest* bad);
};

// Where the (rank, table) segments of pack / unpack sit: count[s] ids of segment s, their
// send_pos entries from pos_begin[s], their vector elements from offsets[s].
struct RowLayout {
  std::vector<int64_t> count, num_unique, offsets, pos_begin;
};

template <typename Device>
struct SendPosCheck {
  // The first send_pos entry of segment s outside [0, num_unique[s % T]): *found and its value.
  static absl::Status FindOutOfRange(tensorflow::OpKernelContext* ctx, const int32_t* pos,
                                     const RowLayout& layout, bool* found, int32_t* value);
};

template <typename Device>
struct UnpackRowsFunctor {
  // Zeroes rows[t], then puts each segment's vectors at their send_pos rows.
  template <typename T>
  static absl::Status Compute(tensorflow::OpKernelContext* ctx, const T* src, const int32_t* pos,
                              const RowLayout& layout, const std::vector<int64_t>& dims,
                              const std::vector<T*>& rows,
                              const std::vector<int64_t>& rows_elements);
};

template <typename Device>
struct PackRowsFunctor {
  template <typename T>
  static absl::Status Compute(tensorflow::OpKernelContext* ctx, const std::vector<const T*>& rows,
                              const int32_t* pos, const RowLayout& layout,
                              const std::vector<int64_t>& dims, T* dst);
};

template <typename Device>
struct ReduceForOwnerFunctor {
  struct Scratch;  // the distinct rows and inverse indices between the two steps, per device
  // Per table, every rank's requests deduplicated (first-occurrence order): num_distinct[t].
  static absl::Status Distinct(tensorflow::OpKernelContext* ctx, const int64_t* message,
                               const ParsedIds& parsed, int64_t num_ranks, int64_t num_tables,
                               Scratch* scratch, std::vector<int64_t>* num_distinct);
  // Writes the distinct rows and the summed gradient rows of each table.
  template <typename T>
  static absl::Status Sum(tensorflow::OpKernelContext* ctx, const Scratch& scratch, const T* grads,
                          const ParsedIds& parsed, const std::vector<int64_t>& offsets,
                          const std::vector<int64_t>& dims, int64_t num_ranks,
                          const std::vector<int64_t*>& rows, const std::vector<T*>& values);
};

// ---- Kernels. ----

template <typename Device>
class PartitionByOwnerOp : public tensorflow::OpKernel {
 public:
  explicit PartitionByOwnerOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadOwners(ctx, &num_ranks_, &owners_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    namespace errors = ::tensorflow::errors;
    tensorflow::OpInputList unique;
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
    }
    int64_t bad_table = -1, bad_id = 0;
    OP_REQUIRES_OK(ctx, PartitionByOwnerFunctor<Device>::FindNegativeId(ctx, ids, sizes, owners_,
                                                                        &bad_table, &bad_id));
    OP_REQUIRES(ctx, bad_table < 0,
                errors::InvalidArgument("table ", bad_table, ": negative id ", bad_id));
    OP_REQUIRES(ctx, total < (int64_t{1} << 31),
                errors::InvalidArgument("more than 2^31 unique ids in one lookup"));
    OP_REQUIRES(
        ctx, num_ranks_ <= (int64_t{1} << 20) && num_tables <= (int64_t{1} << 20),
        errors::InvalidArgument("too many ranks or tables: ", num_ranks_, " x ", num_tables));
    tensorflow::Tensor *message, *splits, *counts, *send_pos;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {num_ranks_ * num_tables + total}, &message));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, {num_ranks_}, &splits));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, {num_ranks_ * num_tables}, &counts));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, {total}, &send_pos));
    OP_REQUIRES_OK(ctx, PartitionByOwnerFunctor<Device>::Compute(
                            ctx, ids, sizes, owners_, num_ranks_, counts->flat<int64_t>().data(),
                            message->flat<int64_t>().data(), splits->flat<int64_t>().data(),
                            send_pos->flat<int32_t>().data()));
  }

 private:
  int64_t num_ranks_ = 1;
  std::vector<Owner> owners_;
};

// Checks, before any request is read, that hash table t (input t) is a table of this device
// with rows of `dim` columns.
template <typename Device>
struct PeerHashTableCheck {
  static absl::Status Run(tensorflow::OpKernelContext* ctx, int t, const std::string& label,
                          int64_t dim);
};

template <typename Device, typename T>
class GatherForPeersOp : public tensorflow::OpKernel {
 public:
  explicit GatherForPeersOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("table_names", &names_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dims", &dims_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dynamic", &dynamic_));
  }

  void Compute(tensorflow::OpKernelContext* ctx) override {
    namespace errors = ::tensorflow::errors;
    const int num_tables = num_inputs() - 2;
    OP_REQUIRES_OK(ctx, CheckDims(dims_, num_tables));
    OP_REQUIRES(ctx, static_cast<int>(dynamic_.size()) == num_tables,
                errors::InvalidArgument("dynamic needs one entry per table"));
    // Every table (kind, dtype, shape) before the message, even an empty one.
    PeerTables tables{names_, dims_, dynamic_, {}};
    tables.vars.resize(num_tables);
    for (int t = 0; t < num_tables; ++t) OP_REQUIRES_OK(ctx, CheckTableInput(ctx, &tables, t));
    const int64_t num_ranks = ctx->input(num_tables + 1).NumElements();
    ParsedIds parsed;
    OP_REQUIRES_OK(ctx, IdMessageParser<Device>::Parse(ctx, num_tables, num_tables, &parsed));
    std::vector<int64_t> offsets;
    VectorOffsets(parsed.count, dims_, num_ranks, &offsets);
    tensorflow::Tensor *vectors, *vector_splits;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {offsets.back()}, &vectors));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, {num_ranks}, &vector_splits));  // host memory
    for (int64_t r = 0; r < num_ranks; ++r) {
      vector_splits->flat<int64_t>()(r) = offsets[(r + 1) * num_tables] - offsets[r * num_tables];
    }
    BadRowRequest bad;
    OP_REQUIRES_OK(ctx, GatherForPeersFunctor<Device>::template Compute<T>(
                            ctx, tables, ctx->input(num_tables).flat<int64_t>().data(), parsed,
                            offsets, num_ranks, vectors->flat<T>().data(), &bad));
    OP_REQUIRES(ctx, bad.table < 0,
                errors::InvalidArgument(tables.Label(bad.table), ": rank ", bad.rank,
                                        " asked for local row ", bad.row, " of ", bad.rows));
  }

 private:
  // Table t of the op: a hash table of this device (T float32), or a variable holding
  // initialized [rows, dims[t]] values that rows of T are read from (tables.vars[t]).
  static absl::Status CheckTableInput(tensorflow::OpKernelContext* ctx, PeerTables* tables, int t) {
    if (tables->dynamic[t]) {
      if (!std::is_same_v<T, float>) {
        return tensorflow::errors::InvalidArgument(tables->Label(t),
                                                   ": hash tables hold float32 rows");
      }
      return PeerHashTableCheck<Device>::Run(ctx, t, tables->Label(t), tables->dims[t]);
    }
    TF_RETURN_IF_ERROR(LookupResource(ctx, HandleFromInput(ctx, t), &tables->vars[t]));
    tensorflow::tf_shared_lock lock(*tables->vars[t]->mu());
    return ForTableType<Device, T>(
        tables->vars[t]->tensor()->dtype(), tables->Label(t), [&](auto stored) -> absl::Status {
          return CheckPeerTable<typename decltype(stored)::type>(*tables, t);
        });
  }

  std::vector<std::string> names_;
  std::vector<int64_t> dims_;
  std::vector<bool> dynamic_;
};

// Checks the counts (host) / send_pos inputs of unpack and pack against the per-table sizes.
template <typename Device>
absl::Status CheckRowLayout(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& counts,
                            const tensorflow::Tensor& send_pos, const std::vector<int64_t>& dims,
                            RowLayout* layout) {
  namespace errors = ::tensorflow::errors;
  const int64_t num_tables = dims.size();
  if (num_tables == 0) return errors::InvalidArgument("dims must name at least one table");
  if (counts.NumElements() % num_tables != 0) {
    return errors::InvalidArgument("counts size is not a multiple of the table count");
  }
  const int64_t num_ranks = counts.NumElements() / num_tables;
  const auto c = counts.flat<int64_t>();
  layout->count.assign(c.data(), c.data() + c.size());
  layout->num_unique.assign(num_tables, 0);
  int64_t total = 0;
  for (int64_t s = 0; s < num_ranks * num_tables; ++s) {
    const int64_t n = layout->count[s];
    if (n < 0 || n > (int64_t{1} << 40)) {
      return errors::InvalidArgument("count ", n, " is out of range");
    }
    layout->num_unique[s % num_tables] += n;
    total += n;
  }
  if (send_pos.NumElements() != total) {
    return errors::InvalidArgument("send_pos has ", send_pos.NumElements(), " entries for ", total,
                                   " ids");
  }
  VectorOffsets(layout->count, dims, num_ranks, &layout->offsets);
  layout->pos_begin.clear();
  for (int64_t s = 0, p = 0; s < num_ranks * num_tables; p += layout->count[s], ++s) {
    layout->pos_begin.push_back(p);
  }
  bool found = false;
  int32_t value = 0;
  TF_RETURN_IF_ERROR(SendPosCheck<Device>::FindOutOfRange(ctx, send_pos.flat<int32_t>().data(),
                                                          *layout, &found, &value));
  if (found) return errors::InvalidArgument("send_pos ", value, " out of range");
  return absl::OkStatus();
}

// Base of the kernels whose dims attribute names each table's row width.
class DimsAttrKernel : public tensorflow::OpKernel {
 public:
  explicit DimsAttrKernel(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dims", &dims_));
  }

 protected:
  std::vector<int64_t> dims_;
};

template <typename Device, typename T>
class UnpackRowsOp : public DimsAttrKernel {
 public:
  using DimsAttrKernel::DimsAttrKernel;

  void Compute(tensorflow::OpKernelContext* ctx) override {
    const tensorflow::Tensor& vectors = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckDims(dims_, num_outputs()));
    RowLayout layout;
    OP_REQUIRES_OK(ctx, CheckRowLayout<Device>(ctx, ctx->input(1), ctx->input(2), dims_, &layout));
    OP_REQUIRES(ctx, vectors.NumElements() == layout.offsets.back(),
                tensorflow::errors::InvalidArgument("vector message has ", vectors.NumElements(),
                                                    " elements, expected ", layout.offsets.back()));
    const int64_t num_tables = dims_.size();
    std::vector<T*> rows(num_tables);
    std::vector<int64_t> elements(num_tables);
    for (int64_t t = 0; t < num_tables; ++t) {
      tensorflow::TensorShape shape;
      OP_REQUIRES_OK(ctx, SafeShape({layout.num_unique[t], dims_[t]}, &shape));
      tensorflow::Tensor* out;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(t, shape, &out));
      rows[t] = out->flat<T>().data();
      elements[t] = out->NumElements();
    }
    OP_REQUIRES_OK(ctx, UnpackRowsFunctor<Device>::template Compute<T>(
                            ctx, vectors.flat<T>().data(), ctx->input(2).flat<int32_t>().data(),
                            layout, dims_, rows, elements));
  }
};

template <typename Device, typename T>
class PackRowsOp : public tensorflow::OpKernel {
 public:
  explicit PackRowsOp(tensorflow::OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(tensorflow::OpKernelContext* ctx) override {
    tensorflow::OpInputList rows;
    OP_REQUIRES_OK(ctx, ctx->input_list("rows", &rows));
    const tensorflow::Tensor& send_pos = ctx->input(rows.size() + 1);
    std::vector<int64_t> dims;
    OP_REQUIRES_OK(ctx, RowWidths(rows, &dims));
    RowLayout layout;
    OP_REQUIRES_OK(ctx,
                   CheckRowLayout<Device>(ctx, ctx->input(rows.size()), send_pos, dims, &layout));
    OP_REQUIRES_OK(ctx, CheckRowCounts(rows, layout.num_unique));
    tensorflow::Tensor* vectors;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {layout.offsets.back()}, &vectors));
    std::vector<const T*> src(rows.size());
    for (int t = 0; t < rows.size(); ++t) src[t] = rows[t].flat<T>().data();
    OP_REQUIRES_OK(
        ctx, PackRowsFunctor<Device>::template Compute<T>(ctx, src, send_pos.flat<int32_t>().data(),
                                                          layout, dims, vectors->flat<T>().data()));
  }
};

template <typename Device, typename T>
class ReduceForOwnerOp : public DimsAttrKernel {
 public:
  using DimsAttrKernel::DimsAttrKernel;

  void Compute(tensorflow::OpKernelContext* ctx) override {
    namespace errors = ::tensorflow::errors;
    const tensorflow::Tensor& grads = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckDims(dims_, num_outputs() / 2));
    OP_REQUIRES(ctx, !dims_.empty(), errors::InvalidArgument("dims must name a table"));
    const int64_t num_tables = dims_.size();
    const int64_t num_ranks = ctx->input(2).NumElements();  // host memory
    ParsedIds parsed;
    OP_REQUIRES_OK(ctx, IdMessageParser<Device>::Parse(ctx, 1, num_tables, &parsed));
    std::vector<int64_t> offsets;
    VectorOffsets(parsed.count, dims_, num_ranks, &offsets);
    OP_REQUIRES(ctx, grads.NumElements() == offsets.back(),
                errors::InvalidArgument("gradient message has ", grads.NumElements(),
                                        " elements, expected ", offsets.back()));
    // The inverse indices of the deduplication are int32.
    for (int64_t t = 0; t < num_tables; ++t) {
      int64_t n = 0;
      for (int64_t r = 0; r < num_ranks; ++r) n += parsed.count[r * num_tables + t];
      OP_REQUIRES(ctx, n < (int64_t{1} << 31),
                  errors::InvalidArgument("table ", t, ": more than 2^31 gradient rows"));
    }
    using Functor = ReduceForOwnerFunctor<Device>;
    typename Functor::Scratch scratch;
    std::vector<int64_t> num_distinct;
    OP_REQUIRES_OK(ctx, Functor::Distinct(ctx, ctx->input(1).flat<int64_t>().data(), parsed,
                                          num_ranks, num_tables, &scratch, &num_distinct));
    std::vector<int64_t*> rows(num_tables);
    std::vector<T*> values(num_tables);
    for (int64_t t = 0; t < num_tables; ++t) {
      tensorflow::Tensor *rows_t, *values_t;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(t, {num_distinct[t]}, &rows_t));
      OP_REQUIRES_OK(ctx,
                     ctx->allocate_output(num_tables + t, {num_distinct[t], dims_[t]}, &values_t));
      rows[t] = rows_t->flat<int64_t>().data();
      values[t] = values_t->flat<T>().data();
    }
    OP_REQUIRES_OK(ctx, Functor::template Sum<T>(ctx, scratch, grads.flat<T>().data(), parsed,
                                                 offsets, dims_, num_ranks, rows, values));
  }
};

}  // namespace sok_lite

#endif  // SOK_LITE_KERNELS_TF_EXCHANGE_KERNELS_H_
