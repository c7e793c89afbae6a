"""OptimizerScope / OptimizerWrapper: stock Keras optimizers, row-wise on sok_lite tables.

Inside the scope, apply_gradients sends the (gradient, table) pairs of sok_lite tables to the
fused row-wise kernel, driven by the optimizer's own hyper-parameters, and hands every other
pair to Keras untouched (see sok_lite.optim.row_wise). Only rows with a gradient change, their slots
too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Literal

import keras
import tensorflow as tf

from sok_lite._keras_internals import built_variables, counting_steps_with
from sok_lite.optim.optimizer_rules import WrapsOptimizer, legacy_base
from sok_lite.optim.row_wise import (
    GradAndVar,
    apply_gradients,
    filter_variables,
    is_table,
    is_variable,
)
from sok_lite.optim.wrapper import OptimizerWrapper as KerasOptimizerWrapper
from sok_lite.tables.table_kind import Optimizer

__all__ = [
    "OptimizerScope",
    "OptimizerWrapper",
    "TFKerasOptimizerWrapper",
    "filter_variables",
    "split_embedding_variable_from_others",
]

split_embedding_variable_from_others = filter_variables


def _optimizer_classes() -> list[type[Optimizer]]:
    """The optimizer base classes whose apply_gradients OptimizerScope routes: Keras 3's, and
    with tf_keras installed its optimizers' and its legacy optimizers' (OptimizerV2)."""
    classes: list[type[Optimizer]] = [keras.optimizers.Optimizer]
    try:
        import tf_keras

        classes.append(tf_keras.optimizers.Optimizer)
    except ImportError:
        pass
    legacy = legacy_base()
    if legacy is not None:
        classes.append(legacy)
    return classes


# The scopes entered and not yet left, in any thread. Keras is patched while there is one:
# replicas of a MirroredStrategy enter their scopes from their own threads, interleaved.
_active_scopes: list[OptimizerScope] = []
_saved_methods: list[tuple[type[Optimizer], str, object]] = []
_scopes_lock = threading.Lock()


def _patch_keras() -> None:
    for cls in _optimizer_classes():
        original = cls.apply_gradients

        def routed(
            opt: Optimizer,
            grads_and_vars: Iterable[GradAndVar],
            *args: object,
            _original: Callable[..., tf.Operation] = original,
            **kwargs: object,
        ) -> tf.Operation:
            return apply_gradients(
                opt,
                grads_and_vars,
                lambda o, gv: _original(o, gv, *args, **kwargs),
                is_table,
            )

        _saved_methods.append((cls, "apply_gradients", original))
        cls.apply_gradients = routed
    # Keras 3's other entry point, apply(grads, variables), must route tables too: else Keras
    # updates them itself, with slots of its own (and fails on an empty [0, dim] shard).
    original_apply = keras.optimizers.Optimizer.apply

    def routed_apply(
        opt: Optimizer,
        grads: Iterable[tf.Tensor],
        trainable_variables: Iterable[tf.Variable] | None = None,
        _original: Callable[..., tf.Operation] = original_apply,
    ) -> tf.Operation:
        if trainable_variables is None:
            if not opt.built:
                return _original(opt, grads)  # Keras' own error
            trainable_variables = built_variables(opt)
        return apply_gradients(
            opt,
            zip(grads, trainable_variables),
            lambda o, gv: _original(o, [g for g, _ in gv], [v for _, v in gv]),
            is_table,
        )

    _saved_methods.append((keras.optimizers.Optimizer, "apply", original_apply))
    keras.optimizers.Optimizer.apply = routed_apply


def _restore_keras() -> None:
    for cls, name, original in reversed(_saved_methods):
        setattr(cls, name, original)
    _saved_methods.clear()


class OptimizerScope:
    """Inside `with OptimizerScope(tables):`, Keras optimizers update sok_lite tables row-wise.

    Every apply_gradients call of a Keras optimizer (Keras 3, tf_keras, or a tf_keras legacy
    optimizer) in the block sends the pairs of sok_lite tables to the fused row-wise kernels,
    with the optimizer's learning rate (schedules and legacy decay included), its other
    hyper-parameters and its clipping and weight decay; other pairs go to Keras as usual.
    Leaving the last open block restores Keras.

    Args:
      var_list: the tables (or one table), or every variable of a model
        (model.trainable_variables): tf and Keras variables that are not tables go to Keras.

    Raises:
      TypeError: an entry of var_list is not a variable.

    >>> import keras, numpy as np, tensorflow as tf, sok_lite as sok
    >>> table = sok.Variable(np.ones([3, 2]), dtype=tf.float32)
    >>> grad = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([1], tf.int64))
    >>> opt = keras.optimizers.SGD(0.5)
    >>> with sok.OptimizerScope([table]):
    ...     _ = opt.apply_gradients([(grad, table)])
    >>> table.numpy().tolist()
    [[1.0, 1.0], [0.5, 0.5], [1.0, 1.0]]
    """

    def __init__(self, var_list: tf.Variable | Iterable[tf.Variable]) -> None:
        # Tables are recognised by type, so var_list is only checked: a value that is no
        # variable is a mistake better reported here than ignored.
        if is_variable(var_list):
            var_list = [var_list]
        for v in var_list:
            if not is_variable(v):
                raise TypeError(
                    f"OptimizerScope takes variables (sok_lite tables, tf.Variable, "
                    f"keras.Variable), got {type(v).__name__}"
                )

    def __enter__(self) -> OptimizerScope:
        with _scopes_lock:
            if not _active_scopes:
                _patch_keras()
            _active_scopes.append(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> Literal[False]:
        with _scopes_lock:
            _active_scopes.remove(self)
            if not _active_scopes:
                _restore_keras()
        return False


def OptimizerWrapper(  # noqa: N802 (SOK's name)
    optimizer: Optimizer,
) -> KerasOptimizerWrapper | TFKerasOptimizerWrapper:
    """Wraps an optimizer so that its apply_gradients routes sok_lite tables to row-wise kernels.

    The object form of OptimizerScope, for code that cannot use a `with` block. A factory: for
    a Keras 3 optimizer it returns sok_lite.keras.OptimizerWrapper(optimizer), a Keras
    optimizer that model.compile accepts; for any other (tf_keras, and the tf_keras legacy
    optimizers SOK's documentation prescribes on TF >= 2.16: tf_keras.optimizers.legacy.SGD,
    Adam, Adagrad, Ftrl, RMSprop, Adamax, Adadelta) a
    sok_lite.optimizer.TFKerasOptimizerWrapper(optimizer), whose other attributes
    (learning_rate, ...) are the wrapped optimizer's. Test for either with
    isinstance(x, (sok.keras.OptimizerWrapper, sok_lite.optimizer.TFKerasOptimizerWrapper)).

    Args:
      optimizer: the Keras 3, tf_keras or tf_keras legacy optimizer to wrap (an object: for a
        name such as "adam", pass keras.optimizers.get("adam")).

    Raises:
      TypeError: optimizer is a name or config dict rather than an optimizer.

    >>> import keras, sok_lite as sok
    >>> type(sok.OptimizerWrapper(keras.optimizers.Adam())).__name__
    'OptimizerWrapper'
    """
    # A name or config dict (what keras.optimizers.get takes) is refused there, with the fix.
    if isinstance(optimizer, (keras.optimizers.Optimizer, str, dict)):
        return KerasOptimizerWrapper(optimizer)
    return TFKerasOptimizerWrapper(optimizer)


class TFKerasOptimizerWrapper(WrapsOptimizer):
    """A tf_keras (or tf_keras legacy) optimizer whose apply_gradients routes sok_lite tables
    to row-wise kernels; sok_lite.OptimizerWrapper builds it for optimizers that are not
    Keras 3's. Other attributes (learning_rate, ...) are the wrapped optimizer's.

    tf_keras optimizers (tf_keras.optimizers SGD, Adam, AdamW, Adagrad, RMSprop, Ftrl, Adamax,
    Adadelta) and legacy ones update the touched rows with their own equations (legacy: `decay`
    included). Several of them, given IndexedSlices, also change rows without a gradient (tf_keras
    SGD with momentum, Adam, RMSprop, Ftrl, Adamax, Adadelta; legacy Adam, RMSprop without
    momentum): the row-wise kernels stay lazy, changing only rows with a gradient and their slots,
    so the result is the same on rows that have a gradient at every step.

    As SOK's wrapper does, this one counts its own steps: `iterations` is the wrapper's, and
    while it applies a step the wrapped optimizer sees that count (bias corrections, schedules,
    legacy `decay`), so steps the wrapped optimizer takes on its own (say, on dense weights)
    neither advance nor read it. sok_lite.dump/load save and restore the wrapper's count.
    """

    def __init__(self, optimizer: Optimizer) -> None:
        self._optimizer = optimizer
        self._iterations = tf.Variable(
            0,
            dtype=tf.int64,
            trainable=False,
            name="iter",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,  # as Keras' own counter
        )

    @property
    def optimizer(self) -> Optimizer:
        return self._optimizer

    @property
    def iterations(self) -> tf.Variable:
        """The steps this wrapper has applied (not those the wrapped optimizer took alone)."""
        return self._iterations

    def apply_gradients(
        self, grads_and_vars: Iterable[GradAndVar], *args: object, **kwargs: object
    ) -> tf.Operation:
        kwargs.pop("experimental_aggregate_gradients", None)  # SOK-era argument: no meaning here
        keras_apply = type(self._optimizer).apply_gradients
        with counting_steps_with(self._optimizer, self._iterations):
            return apply_gradients(
                self._optimizer,
                grads_and_vars,
                lambda o, gv: keras_apply(o, gv, *args, **kwargs),
                is_table,
            )

    def __getattr__(self, name: str) -> object:
        return getattr(self._optimizer, name)
