"""Dynamic loss scaling around sok_lite.keras.OptimizerWrapper: table gradients kept sparse, the
wrapper's own loss scaling kept.

Under the "mixed_float16" policy, `compile` wraps the optimizer in a
keras.optimizers.LossScaleOptimizer (users may write one too). That optimizer multiplies the
loss by its scale, divides each gradient by it (for a tf.IndexedSlices, its values only), skips
the whole step, tables included, when any gradient is not finite, and then halves the scale.
Two of its parts need help:

- Its finite check turns every tf.IndexedSlices into a dense [rows, dim] mask (and fails for a
  hash table, which has no dense shape). The wrapper gives it a finite check that reads the
  values only.
- Its scale_loss multiplies the loss by the scale and never asks the optimizer it wraps, so a
  wrapper's own scale_loss (a Horovod subclass's 1 / num_ranks, which makes each rank's loss
  its part of the global mean) would be dropped and every gradient come out num_ranks times too
  large. The wrapper gives it a scale_loss that applies the wrapper's first.

It also builds itself, the wrapper included, on its first step inside the trace of the training
step: the wrapper has it make its variables outside that trace (eager_build.py), as the wrapper's
own build does, so that `fit` traces the step once.
"""

import tensorflow as tf

from sok_lite import comm
from sok_lite._keras_internals import (
    loss_scale_optimizer_building,
    replace_build,
    replace_finite_check,
    replace_scale_loss,
)
from sok_lite.optim.eager_build import BuildsNow


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


class _WrapperScaleFirst:
    """A LossScaleOptimizer's scale_loss: the wrapper's scale_loss, then the dynamic scale.

    The LossScaleOptimizer has turned off the wrapped optimizer's loss_scale_factor, so for a
    plain wrapper the first part is the identity; a subclass's own factor (1 / num_ranks) stays.
    Only the dynamic scale is divided out of the gradients again, as it should be.
    """

    def __init__(self, keras_scale_loss, wrapper):
        self.keras_scale_loss = keras_scale_loss
        self.wrapper = wrapper

    def __call__(self, loss):
        return self.keras_scale_loss(self.wrapper.scale_loss(loss))


def adapt_loss_scale_optimizer(wrapper) -> None:
    """If a keras LossScaleOptimizer is wrapping or building `wrapper`, makes its finite check
    sparse, its scale_loss apply the wrapper's and its build make variables outside any trace
    (BuildsNow). Called from the LossScaleOptimizer's constructor (through the wrapper's
    loss_scale_factor, which it turns off) and from its build(), so that a LossScaleOptimizer
    made either way, or restored, is adapted before its first step. Adapting one twice changes
    nothing."""
    loss_scale_optimizer = loss_scale_optimizer_building(wrapper)
    if loss_scale_optimizer is None:
        return
    if not isinstance(loss_scale_optimizer.check_finite, _FiniteValues):
        replace_finite_check(loss_scale_optimizer, _FiniteValues(loss_scale_optimizer.check_finite))
    if not isinstance(loss_scale_optimizer.scale_loss, _WrapperScaleFirst):
        replace_scale_loss(
            loss_scale_optimizer, _WrapperScaleFirst(loss_scale_optimizer.scale_loss, wrapper)
        )
    if not isinstance(loss_scale_optimizer.build, BuildsNow):
        replace_build(loss_scale_optimizer, BuildsNow(loss_scale_optimizer.build))
