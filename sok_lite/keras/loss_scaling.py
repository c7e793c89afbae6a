"""Dynamic loss scaling around sok_lite.keras.OptimizerWrapper with table gradients kept sparse.

Under the "mixed_float16" policy, `compile` wraps the optimizer in a
keras.optimizers.LossScaleOptimizer (users may write one too). That optimizer multiplies the
loss by its scale, divides each gradient by it (for a tf.IndexedSlices, its values only), skips
the whole step, tables included, when any gradient is not finite, and then halves the scale.
One part would densify table gradients: its finite check turns every tf.IndexedSlices into a
dense [rows, dim] mask (and fails for a hash table, which has no dense shape). The wrapper gives
the LossScaleOptimizer that builds it a finite check that reads the values only.
"""

import tensorflow as tf

from sok_lite import comm
from sok_lite.keras._keras_internals import loss_scale_optimizer_building, replace_finite_check


class _FiniteValues:
    """A LossScaleOptimizer's check_finite that reads the values of IndexedSlices."""

    def __init__(self, keras_check_finite):
        self.keras_check_finite = keras_check_finite

    def __call__(self, grads) -> tf.Tensor:
        values = [g.values if isinstance(g, tf.IndexedSlices) else g for g in grads]
        finite = self.keras_check_finite(values)
        communicator = comm.current()
        if communicator.num_ranks > 1:
            # Each rank holds the gradients of its own rows: all ranks skip a step, or none.
            not_finite = tf.cast(tf.logical_not(finite), tf.float32)
            finite = tf.equal(communicator.allreduce_sum(not_finite), 0.0)
        return finite


def keep_table_gradients_sparse(wrapper) -> None:
    """If a keras LossScaleOptimizer is building `wrapper`, makes its finite check sparse."""
    loss_scale_optimizer = loss_scale_optimizer_building(wrapper)
    if loss_scale_optimizer is None:
        return
    if isinstance(loss_scale_optimizer.check_finite, _FiniteValues):  # built before
        return
    replace_finite_check(loss_scale_optimizer, _FiniteValues(loss_scale_optimizer.check_finite))
