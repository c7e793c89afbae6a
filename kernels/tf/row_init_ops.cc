// Op registration of the row initializer: deterministic initial rows from (seed, row id), see
// core/row_init.h; its kernels are in row_init_kernels.h.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace sok_lite {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

namespace {

absl::Status InitRowsShape(InferenceContext* c) {
  ShapeHandle ids;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &ids));
  int64_t dim = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("dim", &dim));
  c->set_output(0, c->Matrix(c->Dim(ids, 0), dim));
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("SokLiteInitRows")
    .Input("row_ids: int64")
    .Output("rows: dtype")
    .Attr("dtype: {float, double}")
    .Attr("dim: int >= 0")
    .Attr("kind: string")
    .Attr("seed: int")
    .Attr("a: float = 0.0")
    .Attr("b: float = 1.0")
    .SetShapeFn(InitRowsShape)
    .Doc(R"doc(
Initial rows for row ids (global row ids or hash keys), a pure function of (seed, id, column).

kind: "random_normal" (a = mean, b = stddev), "truncated_normal" (the same, redrawn beyond 2
  stddev), "random_uniform" (a = minval, b = maxval) or "constant" (a = value).
)doc");

}  // namespace sok_lite
