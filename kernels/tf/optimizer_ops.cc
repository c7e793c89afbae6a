// Op registration of the row-wise optimizer family.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace sok_lite {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

namespace {

absl::Status SparseApplyShape(InferenceContext* c) {
  int32_t num_slots = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("num_slots", &num_slots));
  ShapeHandle indices, grads, hyper;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(num_slots + 1), 1, &indices));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(num_slots + 2), 2, &grads));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(num_slots + 3), 1, &hyper));
  ShapeHandle step;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(num_slots + 4), 0, &step));
  ::tensorflow::shape_inference::DimensionHandle n;
  return c->Merge(c->Dim(indices, 0), c->Dim(grads, 0), &n);
}

}  // namespace

REGISTER_OP("SokLiteSparseApply")
    .Input("var: resource")
    .Input("slots: num_slots * resource")
    .Input("indices: int64")
    .Input("grads: dtype")
    .Input("hyper: float64")
    .Input("step: int64")
    .Input("trackers: num_trackers * resource")
    .Attr("num_slots: int >= 0")
    .Attr("num_trackers: int >= 0 = 0")
    .Attr("dtype: {float, double}")
    .Attr("kind: string")
    .Attr("var_name: string = ''")
    .Attr("rounding_seed: int = 0")
    .Attr("row_stride: int = 1")
    .Attr("row_offset: int = 0")
    .SetShapeFn(SparseApplyShape)
    .Doc(R"doc(
Applies one optimizer step to the rows `indices` of `var` and of its slots, in place under the
variables' locks. Rows that appear several times have their gradients summed first.

dtype: the gradients' and slots' dtype. `var` holds dtype, or with float32 gradients bfloat16 or
  float16: its rows are then updated in float32 and rounded back (bfloat16 stochastically,
  float16 to nearest even). Beside such a 16-bit `var` the slots may all be bfloat16 instead
  of float32: widened, updated in float32 and rounded back stochastically as well.
hyper: [learning_rate, weight_decay, optimizer parameters...] (see kernels/core/optimizer.h).
step: the optimizer step being applied; with rounding_seed it draws the stochastic rounding.
kind: sgd | momentum | nesterov | adam | amsgrad | adagrad | rmsprop | ftrl | adamax | adadelta.
row_stride, row_offset: the global row of local row r is r * row_stride + row_offset, so that
  the rounding of a row does not depend on the number of ranks.
trackers: none, or one int64 variable of shape [rows of var]: each updated row's entry is set to
  `step` in the same pass (which rows changed since a step, for incremental dumps).
)doc");

}  // namespace sok_lite
