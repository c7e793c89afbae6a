"""The row-wise optimizer op: one fused, in-place update of the touched rows and their slots."""

import tensorflow as tf

from sok_lite._loader import ops as _ops


def sparse_apply(var_handle, slot_handles, indices, grads, hyper, kind, var_name="", name=None):
    """Updates rows `indices` of a variable and its slots with gradient rows `grads`.

    Args:
      var_handle: the variable's resource handle ([rows, dim]).
      slot_handles: the slots' handles, shaped like the variable, in the order of `kind`.
      indices: int64 [n] local rows (repeats are summed).
      grads: [n, dim] gradient rows, the variable's dtype.
      hyper: float64 [learning_rate, weight_decay, parameters...] (kernels/core/optimizers.h).
      kind: sgd | momentum | nesterov | adam | amsgrad | adagrad | rmsprop | ftrl | adamax |
        adadelta.
    """
    with tf.name_scope(name or "sok_lite_sparse_apply"):
        return _ops().sok_lite_sparse_apply(
            var=var_handle,
            slots=slot_handles,
            indices=indices,
            grads=grads,
            hyper=hyper,
            kind=kind,
            var_name=var_name,
        )


tf.no_gradient("SokLiteSparseApply")
