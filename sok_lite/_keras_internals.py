"""The Keras 3 and TensorFlow internals sok_lite.keras and sok_lite.optim rely on, in one place.

Each name here is private to Keras or TensorFlow and registered, with the features that need it,
in sok_lite/_tf_internals.py (NAMES, FEATURES): probed when sok_lite is imported, and each
function here raises MissingInternalError for its feature when a name it needs has moved.
tests/keras/test_keras_internals.py checks that each still does what sok_lite relies on.
"""

import contextlib
import sys

import keras
import tensorflow as tf

from sok_lite._errors import table_label
from sok_lite._tf_internals import probe, require

_LAYERS = "sok_lite.keras layers holding tables"
_LOSS_SCALING = "mixed-precision loss scaling (keras.optimizers.LossScaleOptimizer)"


def track_table(layer, table: tf.Variable) -> None:
    """Lists a sok_lite table among `layer`'s weights, as `add_weight` does for Keras variables.

    Keras 3 collects `layer.trainable_variables` (and through it `model.trainable_variables`,
    `model.weights`, `summary()`, `save_weights()`) from stores that its attribute tracker only
    fills with `keras.Variable`s. Our tables are TF resource variables, so they are added to
    the store directly, with the attributes Keras reads off a weight (none of which applies to
    a table: no regularizer). `Layer._tracker.add_to_store` is private to Keras.
    """
    require(_LAYERS)
    # What Keras reads off every weight (regularization losses, weight maps); TF variables
    # already have `constraint` (None).
    table.regularizer = None
    table.overwrite_with_gradient = False
    table.path = table_label(table)
    store = "trainable_variables" if table.trainable else "non_trainable_variables"
    layer._tracker.add_to_store(store, table)


def set_trainable(table: tf.Variable, trainable: bool) -> None:
    """Freezes or unfreezes a table, as Keras does for `keras.Variable.trainable = ...`.

    A TF variable's `trainable` is read-only, but Keras freezes a layer by setting it on each
    weight. `_trainable` is what TF reads for it: a frozen table leaves the layer's trainable
    weights and GradientTapes stop watching it. A ReplicaShards passes it on to its shards.
    """
    require("freezing tables (trainable=False)")
    table._trainable = bool(trainable)


def in_symbolic_build() -> bool:
    """True while Keras traces a model only to infer shapes (backend.compute_output_spec, which
    fit and evaluate run in cross-replica context under a tf.distribute strategy).

    Keras marks that trace with its SymbolicScope; the query is private to Keras.
    """
    require("sok_lite.keras layers in fit under a tf.distribute strategy")
    from keras.src.backend.common.symbolic_scope import in_symbolic_scope

    return bool(in_symbolic_scope())


def built_variables(optimizer) -> list:
    """The variables a built Keras 3 optimizer was built with, in build order: what
    `optimizer.apply(grads)` pairs the gradients with when no variables are given.
    `Optimizer._trainable_variables` is private to Keras."""
    require("Keras optimizers applying tables")
    return optimizer._trainable_variables


@contextlib.contextmanager
def counting_steps_with(optimizer, iterations: tf.Variable):
    """For the block, a tf_keras (or legacy) optimizer reads and advances `iterations` as its own
    step counter. Both keep it in `_iterations`, private to tf_keras, behind `iterations`."""
    require("tf_keras optimizers")
    saved = optimizer._iterations
    optimizer._iterations = iterations
    try:
        yield
    finally:
        optimizer._iterations = saved


# How far up the call stack a LossScaleOptimizer's build() may be from its inner optimizer's:
# a decorator's frame lies between them.
_FRAMES_TO_SEARCH = 8


def loss_scale_optimizer_building(inner):
    """The keras.optimizers.LossScaleOptimizer whose constructor or build() is calling into
    `inner`, its inner optimizer, or None.

    A LossScaleOptimizer turns off its inner optimizer's loss_scale_factor from its constructor
    and builds it from its own build(), and hands it no reference to itself, so the inner
    optimizer finds it on the call stack. Those call paths are private to Keras; reading
    callers' frames is a CPython detail. Every optimizer wrapper asks, with a LossScaleOptimizer
    or without: the feature's other names are required once one is found (replace_*).
    """
    frame = sys._getframe(1)
    for _ in range(_FRAMES_TO_SEARCH):
        if frame is None:
            return None
        caller = frame.f_locals.get("self")
        if (
            isinstance(caller, keras.optimizers.LossScaleOptimizer)
            and getattr(caller, "inner_optimizer", None) is inner
        ):
            return caller
        frame = frame.f_back
    return None


def replace_finite_check(loss_scale_optimizer, check_finite) -> None:
    """Makes this one LossScaleOptimizer decide with `check_finite(grads)` whether a step's
    gradients are all finite.

    Its apply() asks its own `check_finite` method (a private call path): an attribute of the
    instance takes precedence over the class' method, so no other optimizer changes. Set
    without Keras' attribute tracking, which has nothing to track in a function.
    """
    require(_LOSS_SCALING)
    object.__setattr__(loss_scale_optimizer, "check_finite", check_finite)


def replace_scale_loss(loss_scale_optimizer, scale_loss) -> None:
    """Makes this one LossScaleOptimizer scale losses with `scale_loss(loss)`.

    Keras' trainers call `optimizer.scale_loss(loss)`, which finds an attribute of the instance
    before the class' method, as replace_finite_check relies on; set the same way.
    """
    require(_LOSS_SCALING)
    object.__setattr__(loss_scale_optimizer, "scale_loss", scale_loss)


def replace_build(loss_scale_optimizer, build) -> None:
    """Makes this one LossScaleOptimizer build itself with `build(var_list)`.

    Its apply() builds it through `self.build` (a private call path) on its first step, inside
    the trace of the training step under `fit`; set on the instance as replace_finite_check is.
    """
    require(_LOSS_SCALING)
    object.__setattr__(loss_scale_optimizer, "build", build)


probe()  # the Keras names, now that Keras is imported (once: probed names are skipped)
