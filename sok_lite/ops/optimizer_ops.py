"""The row-wise optimizer op: one fused, in-place update of the touched rows and their slots."""

import tensorflow as tf

from sok_lite.ops.op_inputs import op_wrapper, run_op


@op_wrapper
def sparse_apply(
    var: tf.Tensor,
    slots: list[tf.Tensor],
    indices: tf.Tensor,
    grads: tf.Tensor,
    hyper: tf.Tensor,
    kind: str,
    var_name: str = "",
    name: str | None = None,
    *,
    step: int | tf.Tensor = 0,
    rounding_seed: int = 0,
    row_stride: int = 1,
    row_offset: int = 0,
    trackers: list[tf.Tensor] | tuple[tf.Tensor, ...] = (),
) -> tf.Operation:
    """Updates rows `indices` of a variable and its slots with gradient rows `grads`.

    Args:
      var: the variable's resource handle ([rows, dim]).
      slots: the slots' handles, shaped like the variable, in the order of `kind`:
        the gradients' dtype, or (all of them) bfloat16 beside a 16-bit variable.
      indices: int64 [n] local rows (repeats are summed).
      grads: [n, dim] gradient rows: the variable's dtype, or float32 for a bfloat16 / float16
        variable (updated in float32, then rounded back).
      hyper: float64 [learning_rate, weight_decay, parameters...] (kernels/core/optimizer.h).
      kind: sgd | momentum | nesterov | adam | amsgrad | adagrad | rmsprop | ftrl | adamax |
        adadelta.
      step: int64 scalar, the optimizer step; with rounding_seed, it draws a bfloat16
        variable's stochastic rounding.
      row_stride, row_offset: global row = local row * row_stride + row_offset (the rounding of
        a row is then the same on any number of ranks).
      trackers: none, or the handle of one int64 variable [rows]: the entry of each updated row
        is set to `step` in the same pass.
    """
    return run_op("sparse_apply", locals(), step=tf.cast(step, tf.int64), trackers=list(trackers))


tf.no_gradient("SokLiteSparseApply")
