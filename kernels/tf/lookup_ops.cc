// Op registrations of the lookup family. The lookup is split into four ops so that the distributed
// path can put collectives between them: unique ids -> gather rows -> combine per sample, and the
// gradient of the combine.
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

// Batch size of a ragged feature: its row_splits have batch + 1 entries.
Status BatchFromRowSplits(InferenceContext* c, int row_splits_input, DimensionHandle* batch) {
  ShapeHandle splits;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(row_splits_input), 1, &splits));
  return c->Subtract(c->Dim(splits, 0), 1, batch);
}

// Inputs: ids[N], row_splits[N]. Outputs: unique_ids[N] (length unknown), inverse[N] (as ids).
Status UniqueIdsShape(InferenceContext* c) {
  const int32_t n = NumTables(c);
  for (int32_t t = 0; t < n; ++t) {
    ShapeHandle ids;
    TF_RETURN_IF_ERROR(c->WithRank(c->input(t), 1, &ids));
    DimensionHandle batch;
    TF_RETURN_IF_ERROR(BatchFromRowSplits(c, n + t, &batch));
    c->set_output(t, c->Vector(InferenceContext::kUnknownDim));
    c->set_output(n + t, ids);
  }
  return absl::OkStatus();
}

// Inputs: handles[N], indices[N]. Outputs: rows[N] of shape [len(indices), dim of the variable].
Status GatherRowsShape(InferenceContext* c) {
  const int32_t n = NumTables(c);
  for (int32_t t = 0; t < n; ++t) {
    ShapeHandle indices;
    TF_RETURN_IF_ERROR(c->WithRank(c->input(n + t), 1, &indices));
    DimensionHandle dim = c->UnknownDim();
    const auto* handle_data = c->input_handle_shapes_and_types(t);
    if (handle_data != nullptr && handle_data->size() == 1) {
      ShapeHandle var_shape;
      TF_RETURN_IF_ERROR(c->WithRank((*handle_data)[0].shape, 2, &var_shape));
      dim = c->Dim(var_shape, 1);
    }
    c->set_output(t, c->Matrix(c->Dim(indices, 0), dim));
  }
  return absl::OkStatus();
}

// Inputs: rows[N] [U, dim], inverse[N], row_splits[N], weights[N]. Outputs: [batch, dim].
Status SegmentCombineShape(InferenceContext* c) {
  const int32_t n = NumTables(c);
  for (int32_t t = 0; t < n; ++t) {
    ShapeHandle rows, inverse, weights;
    TF_RETURN_IF_ERROR(c->WithRank(c->input(t), 2, &rows));
    TF_RETURN_IF_ERROR(c->WithRank(c->input(n + t), 1, &inverse));
    TF_RETURN_IF_ERROR(c->WithRank(c->input(3 * n + t), 1, &weights));
    DimensionHandle batch;
    TF_RETURN_IF_ERROR(BatchFromRowSplits(c, 2 * n + t, &batch));
    c->set_output(t, c->Matrix(batch, c->Dim(rows, 1)));
  }
  return absl::OkStatus();
}

// Inputs: grads[N] [batch, dim], inverse[N], row_splits[N], weights[N], num_unique[N] (scalars).
// Outputs: row_grads[N] [num_unique, dim].
Status SegmentCombineGradShape(InferenceContext* c) {
  const int32_t n = NumTables(c);
  for (int32_t t = 0; t < n; ++t) {
    ShapeHandle grads, unused;
    TF_RETURN_IF_ERROR(c->WithRank(c->input(t), 2, &grads));
    TF_RETURN_IF_ERROR(c->WithRank(c->input(n + t), 1, &unused));
    TF_RETURN_IF_ERROR(c->WithRank(c->input(3 * n + t), 1, &unused));
    TF_RETURN_IF_ERROR(c->WithRank(c->input(4 * n + t), 0, &unused));
    DimensionHandle batch;
    TF_RETURN_IF_ERROR(BatchFromRowSplits(c, 2 * n + t, &batch));
    TF_RETURN_IF_ERROR(c->Merge(c->Dim(grads, 0), batch, &batch));
    DimensionHandle num_unique;
    TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(4 * n + t, &num_unique));
    c->set_output(t, c->Matrix(num_unique, c->Dim(grads, 1)));
  }
  return absl::OkStatus();
}

// Inputs: row_ids [n], nrows scalar. Output: row_splits [nrows + 1].
Status RowSplitsFromRowIdsShape(InferenceContext* c) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &unused));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &unused));
  DimensionHandle nrows;
  TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(1, &nrows));
  DimensionHandle splits;
  TF_RETURN_IF_ERROR(c->Add(nrows, 1, &splits));
  c->set_output(0, c->Vector(splits));
  return absl::OkStatus();
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
    .SetShapeFn(GatherRowsShape)
    .Doc(R"doc(
Reads rows of N resource variables in place, under each variable's lock (no copy of the table).
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
