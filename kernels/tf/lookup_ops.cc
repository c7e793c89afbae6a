// Op registrations of the lookup family. The lookup is split into four ops so that the distributed
// path can put collectives between them: unique ids -> gather rows -> combine per sample, and the
// gradient of the combine.
#include <string>
#include <vector>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace sok_lite {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

namespace {

int32_t NumTables(InferenceContext* c) {
  int32_t n = 0;
  return c->GetAttr("N", &n).ok() ? n : 0;
}

// The index of the first input of list `name` of op `op`. The InferenceContext gives a list's
// shapes by name but resource handle data and constant inputs only by index; the offset comes
// from the op's registration, where every list input has N entries.
Status ListStart(InferenceContext* c, const std::string& op, absl::string_view name, int* start) {
  const tensorflow::OpDef* def = nullptr;
  TF_RETURN_IF_ERROR(tensorflow::OpRegistry::Global()->LookUpOpDef(op, &def));
  *start = 0;
  for (const auto& arg : def->input_arg()) {
    if (arg.name() == name) return absl::OkStatus();
    *start += arg.number_attr().empty() ? 1 : NumTables(c);
  }
  return tensorflow::errors::InvalidArgument(op, " has no input ", name);
}

// The shapes of list input `name`, each checked to have rank `rank`.
Status ListWithRank(InferenceContext* c, absl::string_view name, int rank,
                    std::vector<ShapeHandle>* shapes) {
  TF_RETURN_IF_ERROR(c->input(name, shapes));
  for (ShapeHandle& shape : *shapes) TF_RETURN_IF_ERROR(c->WithRank(shape, rank, &shape));
  return absl::OkStatus();
}

// Batch size of a ragged feature: its row_splits have batch + 1 entries.
Status BatchFromRowSplits(InferenceContext* c, ShapeHandle splits, DimensionHandle* batch) {
  TF_RETURN_IF_ERROR(c->WithRank(splits, 1, &splits));
  return c->Subtract(c->Dim(splits, 0), 1, batch);
}

// Inputs: ids[N], row_splits[N]. Outputs: unique_ids[N] (length unknown), inverse[N] (as ids).
Status UniqueIdsShape(InferenceContext* c) {
  std::vector<ShapeHandle> ids, splits;
  TF_RETURN_IF_ERROR(ListWithRank(c, "ids", 1, &ids));
  TF_RETURN_IF_ERROR(c->input("row_splits", &splits));
  std::vector<ShapeHandle> unique_ids;
  for (size_t t = 0; t < ids.size(); ++t) {
    DimensionHandle batch;
    TF_RETURN_IF_ERROR(BatchFromRowSplits(c, splits[t], &batch));
    unique_ids.push_back(c->Vector(InferenceContext::kUnknownDim));
  }
  TF_RETURN_IF_ERROR(c->set_output("unique_ids", unique_ids));
  return c->set_output("inverse", ids);
}

// Inputs: handles[N], indices[N]. Outputs: rows[N] of shape [len(indices), dim of the variable].
Status GatherRowsShape(InferenceContext* c) {
  std::vector<ShapeHandle> indices;
  TF_RETURN_IF_ERROR(ListWithRank(c, "indices", 1, &indices));
  int handles = 0;
  TF_RETURN_IF_ERROR(ListStart(c, "SokLiteGatherRows", "handles", &handles));
  std::vector<ShapeHandle> rows;
  for (size_t t = 0; t < indices.size(); ++t) {
    DimensionHandle dim = c->UnknownDim();
    const auto* handle_data = c->input_handle_shapes_and_types(handles + t);
    if (handle_data != nullptr && handle_data->size() == 1) {
      ShapeHandle var_shape;
      TF_RETURN_IF_ERROR(c->WithRank((*handle_data)[0].shape, 2, &var_shape));
      dim = c->Dim(var_shape, 1);
    }
    rows.push_back(c->Matrix(c->Dim(indices[t], 0), dim));
  }
  return c->set_output("rows", rows);
}

// Inputs: rows[N] [U, dim], inverse[N], row_splits[N], weights[N]. Outputs: [batch, dim].
Status SegmentCombineShape(InferenceContext* c) {
  std::vector<ShapeHandle> rows, unused, splits;
  TF_RETURN_IF_ERROR(ListWithRank(c, "rows", 2, &rows));
  TF_RETURN_IF_ERROR(ListWithRank(c, "inverse", 1, &unused));
  TF_RETURN_IF_ERROR(ListWithRank(c, "weights", 1, &unused));
  TF_RETURN_IF_ERROR(c->input("row_splits", &splits));
  std::vector<ShapeHandle> embeddings;
  for (size_t t = 0; t < rows.size(); ++t) {
    DimensionHandle batch;
    TF_RETURN_IF_ERROR(BatchFromRowSplits(c, splits[t], &batch));
    embeddings.push_back(c->Matrix(batch, c->Dim(rows[t], 1)));
  }
  return c->set_output("embeddings", embeddings);
}

// Inputs: grads[N] [batch, dim], inverse[N], row_splits[N], weights[N], num_unique[N] (scalars).
// Outputs: row_grads[N] [num_unique, dim].
Status SegmentCombineGradShape(InferenceContext* c) {
  std::vector<ShapeHandle> grads, unused, splits;
  TF_RETURN_IF_ERROR(ListWithRank(c, "grads", 2, &grads));
  TF_RETURN_IF_ERROR(ListWithRank(c, "inverse", 1, &unused));
  TF_RETURN_IF_ERROR(ListWithRank(c, "weights", 1, &unused));
  TF_RETURN_IF_ERROR(ListWithRank(c, "num_unique", 0, &unused));
  TF_RETURN_IF_ERROR(c->input("row_splits", &splits));
  int num_unique_start = 0;
  TF_RETURN_IF_ERROR(ListStart(c, "SokLiteSegmentCombineGrad", "num_unique", &num_unique_start));
  std::vector<ShapeHandle> row_grads;
  for (size_t t = 0; t < grads.size(); ++t) {
    DimensionHandle batch;
    TF_RETURN_IF_ERROR(BatchFromRowSplits(c, splits[t], &batch));
    TF_RETURN_IF_ERROR(c->Merge(c->Dim(grads[t], 0), batch, &batch));
    DimensionHandle num_unique;
    TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(num_unique_start + t, &num_unique));
    row_grads.push_back(c->Matrix(num_unique, c->Dim(grads[t], 1)));
  }
  return c->set_output("row_grads", row_grads);
}

// Inputs: row_ids [n], nrows scalar. Output: row_splits [nrows + 1].
Status RowSplitsFromRowIdsShape(InferenceContext* c) {
  std::vector<ShapeHandle> unused;
  TF_RETURN_IF_ERROR(ListWithRank(c, "row_ids", 1, &unused));
  TF_RETURN_IF_ERROR(ListWithRank(c, "nrows", 0, &unused));
  int nrows_index = 0;
  TF_RETURN_IF_ERROR(ListStart(c, "SokLiteRowSplitsFromRowIds", "nrows", &nrows_index));
  DimensionHandle nrows;
  TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(nrows_index, &nrows));
  DimensionHandle splits;
  TF_RETURN_IF_ERROR(c->Add(nrows, 1, &splits));
  return c->set_output("row_splits", {c->Vector(splits)});
}

}  // namespace

REGISTER_OP("SokLiteRowSplitsFromRowIds")
    .Input("row_ids: int64")
    .Input("nrows: int64")
    .Output("row_splits: int64")
    .Attr("table_name: string = ''")
    .SetShapeFn(RowSplitsFromRowIdsShape)
    .Doc(R"doc(
Row splits of a 2-D SparseTensor from its indices[:, 0], checking row-major order.
)doc");

REGISTER_OP("SokLiteUniqueIds")
    .Input("ids: N * int64")
    .Input("row_splits: N * int64")
    .Output("unique_ids: N * int64")
    .Output("inverse: N * int32")
    .Attr("N: int >= 1")
    .Attr("num_rows: list(int)")
    .Attr("hotness: list(int)")
    .Attr("table_names: list(string)")
    .SetShapeFn(UniqueIdsShape)
    .Doc(R"doc(
Validates ragged ids of N tables and deduplicates each table's ids.

ids: flat ids of each table (the values of a [batch, None] ragged tensor).
row_splits: [batch + 1] row splits of each table.
unique_ids: distinct ids of each table, in order of first occurrence.
inverse: position of every id in unique_ids.
num_rows: per table, ids must lie in [0, num_rows); -1 for any value (hash-table keys).
hotness: per table, the most ids a sample may have; 0 for no limit.
table_names: per table, the label that starts its error messages ("table 1 ('items')").
)doc");

REGISTER_OP("SokLiteGatherRows")
    .Input("handles: N * resource")
    .Input("indices: N * int64")
    .Output("rows: N * dtype")
    .Attr("N: int >= 1")
    .Attr("dtype: {float, double}")
    .Attr("table_names: list(string)")
    .Attr("per_sample: bool = false")
    .SetShapeFn(GatherRowsShape)
    .Doc(R"doc(
Reads rows of N resource variables in place, under each variable's lock (no copy of the table).

dtype: the dtype of the rows read. The variables hold dtype, or for float also bfloat16 or
  float16 (16-bit tables), whose rows are widened to float32 as they are copied.
per_sample: indices are the ids of samples that have one id each (the rows are then the
  lookup's output): an id out of range is named with its sample, and the gradient sums each
  id's rows into one (sok_lite/ops/lookup_ops.py).
)doc");

REGISTER_OP("SokLiteSegmentCombine")
    .Input("rows: N * dtype")
    .Input("inverse: N * int32")
    .Input("row_splits: N * int64")
    .Input("weights: N * dtype")
    .Output("embeddings: N * dtype")
    .Attr("N: int >= 1")
    .Attr("dtype: {float, double}")
    .Attr("combiners: list(string)")
    .SetShapeFn(SegmentCombineShape)
    .Doc(R"doc(
Combines the rows of each sample: out[b] = combine(w[k] * rows[inverse[k]] for k in sample b).

weights: per-id weights, or an empty tensor for weight 1.
combiners: per table, "sum", "mean" or "sqrtn". A sample with no ids gives a zero row.
)doc");

REGISTER_OP("SokLiteSegmentCombineGrad")
    .Input("grads: N * dtype")
    .Input("inverse: N * int32")
    .Input("row_splits: N * int64")
    .Input("weights: N * dtype")
    .Input("num_unique: N * int64")
    .Output("row_grads: N * dtype")
    .Attr("N: int >= 1")
    .Attr("dtype: {float, double}")
    .Attr("combiners: list(string)")
    .SetShapeFn(SegmentCombineGradShape)
    .Doc(R"doc(
Gradient of SokLiteSegmentCombine with respect to rows: one summed row per unique id.
)doc");

}  // namespace sok_lite
