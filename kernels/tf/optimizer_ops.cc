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
    .Attr("num_slots: int >= 0")
    .Attr("dtype: {float, double}")
    .Attr("kind: string")
    .Attr("var_name: string = ''")
    .SetShapeFn(SparseApplyShape)
    .Doc(R"doc(
Applies one optimizer step to the rows `indices` of `var` and of its slots, in place under the
variables' locks. Rows that appear several times have their gradients summed first.

hyper: [learning_rate, weight_decay, optimizer parameters...] (see kernels/core/optimizers.h).
kind: sgd | momentum | nesterov | adam | amsgrad | adagrad | rmsprop | ftrl | adamax | adadelta.
)doc");

}  // namespace sok_lite
