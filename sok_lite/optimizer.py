"""OptimizerScope / OptimizerWrapper: stock Keras optimizers, row-wise on sok_lite tables.

Inside the scope, apply_gradients sends the (gradient, table) pairs of sok_lite tables to the
fused row-wise kernel, driven by the optimizer's own hyper-parameters, and hands every other
pair to Keras untouched. Only rows with a gradient change, their slots too.
"""

import contextlib
import threading

import keras
import tensorflow as tf

from sok_lite import comm
from sok_lite._compat import check_numerics_enabled
from sok_lite.comm.shards import ReplicaShards, local_shard
from sok_lite.dynamic import DynamicVariable
from sok_lite.ops import dynamic_ops
from sok_lite.ops.optimizer_ops import sparse_apply
from sok_lite.optimizer_rules import learning_rate, legacy_base, rule_for, weight_decay
from sok_lite.slots import get_slots, record_update
from sok_lite.variable import Variable


def filter_variables(variables) -> tuple[list, list]:
    """Splits variables into (sok_lite tables, everything else), keeping their order.

    >>> import numpy as np, tensorflow as tf, sok_lite as sok
    >>> ours, others = sok.filter_variables([sok.Variable(np.zeros([2, 2])), tf.Variable(1.0)])
    >>> len(ours), len(others)
    (1, 1)
    """
    ours, others = [], []
    for v in variables:
        (ours if _is_table(v) else others).append(v)
    return ours, others


def _is_table(var) -> bool:
    return isinstance(var, (Variable, DynamicVariable, ReplicaShards))


split_embedding_variable_from_others = filter_variables


def _is_variable(value) -> bool:
    return _is_table(value) or isinstance(value, (tf.Variable, keras.Variable))


def _as_rows(grad, var) -> tf.IndexedSlices:
    """The gradient as IndexedSlices over local rows, checked against the table."""
    name = var.name.split(":")[0]
    if isinstance(grad, tf.IndexedSlices):
        values, indices = grad.values, tf.cast(grad.indices, tf.int64)
    else:
        values = tf.convert_to_tensor(grad)
        indices = tf.range(tf.shape(values, out_type=tf.int64)[0])
    if values.dtype != var.dtype:
        raise ValueError(
            f"gradient of '{name}' has dtype {values.dtype.name}, the table {var.dtype.name}"
        )
    if values.shape.rank != 2 or not values.shape[1:].is_compatible_with(var.shape[1:]):
        raise ValueError(f"gradient of '{name}' has shape {values.shape}, the table {var.shape}")
    if check_numerics_enabled():
        # tf.debugging.enable_check_numerics() checks op outputs; the row-wise kernels update
        # in place and output nothing, so what they are about to apply is checked here.
        op = "SokLiteDynamicApply" if isinstance(var, DynamicVariable) else "SokLiteSparseApply"
        values = tf.debugging.check_numerics(values, f"gradient of '{name}' given to {op}")
    if isinstance(var, DynamicVariable):
        return tf.IndexedSlices(values, indices)  # indices are keys: no dense shape
    # The static shape: tf.shape(var) would read (and in copy-on-read mode copy) the whole table.
    return tf.IndexedSlices(values, indices, tf.constant(var.shape.as_list(), tf.int64))


def _sq_norm(values) -> tf.Tensor:
    return tf.reduce_sum(tf.square(tf.cast(values, tf.float32)))


def _clip(optimizer, ours, dense):
    """Keras' clipvalue / clipnorm / global_clipnorm, with norms over every rank's rows.

    Returns the clipped (ours, dense) and whether Keras must skip its own global clipping.
    """
    communicator = comm.current()
    clipnorm = getattr(optimizer, "clipnorm", None)
    global_clipnorm = getattr(optimizer, "global_clipnorm", None)
    clipvalue = getattr(optimizer, "clipvalue", None)
    if clipnorm and clipnorm > 0:
        clipped = []
        for g, v in ours:
            norm = tf.sqrt(communicator.allreduce_sum(_sq_norm(g.values)))
            values = g.values * clipnorm / tf.cast(tf.maximum(norm, clipnorm), g.values.dtype)
            clipped.append((tf.IndexedSlices(values, g.indices, g.dense_shape), v))
        return clipped, dense, False
    if global_clipnorm and global_clipnorm > 0:
        total = tf.add_n([communicator.allreduce_sum(_sq_norm(g.values)) for g, _ in ours])
        for g, _ in dense:
            g = g.values if isinstance(g, tf.IndexedSlices) else g
            total += _sq_norm(g)
        norm = tf.sqrt(total)
        scale = global_clipnorm * tf.minimum(1.0 / norm, 1.0 / global_clipnorm)
        scale = scale + (norm - norm)  # NaN/Inf norms propagate, as in Keras

        def scaled(g):
            if isinstance(g, tf.IndexedSlices):
                return tf.IndexedSlices(
                    g.values * tf.cast(scale, g.dtype), g.indices, g.dense_shape
                )
            return g * tf.cast(scale, g.dtype)

        return ([(scaled(g), v) for g, v in ours], [(scaled(g), v) for g, v in dense], True)
    if clipvalue and clipvalue > 0:
        ours = [
            (
                tf.IndexedSlices(
                    tf.clip_by_value(g.values, -clipvalue, clipvalue), g.indices, g.dense_shape
                ),
                v,
            )
            for g, v in ours
        ]
    return ours, dense, False


@contextlib.contextmanager
def _without_global_clipnorm(optimizer, active: bool):
    if not active:
        yield
        return
    saved = optimizer.global_clipnorm
    optimizer.global_clipnorm = None
    try:
        yield
    finally:
        optimizer.global_clipnorm = saved


def apply_gradients(optimizer, grads_and_vars, keras_apply, is_ours):
    """Routes (grad, var) pairs: is_ours(var) -> row-wise kernel, the rest -> keras_apply.

    The optimizer's iterations advance once, as in Keras.
    """
    pairs = [(g, v) for g, v in grads_and_vars]
    # Each rank applies its rows to its own shard (the running replica's, under a strategy).
    ours = [
        (_as_rows(g, local_shard(v)), local_shard(v))
        for g, v in pairs
        if g is not None and is_ours(v)
    ]
    dense = [(g, v) for g, v in pairs if not is_ours(v)]
    if ours and getattr(optimizer, "loss_scale_factor", None):
        raise ValueError(
            "loss_scale_factor is not supported for sok_lite tables: their "
            "gradients would be applied scaled"
        )
    if not ours:
        if not dense:  # nothing but tables without a gradient: the step still counts
            return optimizer.iterations.assign_add(1)
        return keras_apply(optimizer, dense)
    rule = rule_for(optimizer)
    ours, dense, clipped_globally = _clip(optimizer, ours, dense)
    hyper = tf.stack([learning_rate(optimizer), weight_decay(optimizer)] + rule.params(optimizer))
    for g, v in ours:
        name = v.name.split(":")[0]
        step = tf.cast(optimizer.iterations, tf.int64) + 1
        if isinstance(v, DynamicVariable):  # slots live in the hash table beside each row
            slot_init = [fill for _, fill in rule.slots]
            label = f"dynamic table '{name}'"
            dynamic_ops.apply(
                v.handle, g.indices, g.values, hyper, rule.kind, slot_init, label, step
            )
            continue
        slots = get_slots(optimizer, v, rule.slots)
        handles = [s.handle for s in slots]
        sparse_apply(v.handle, handles, g.indices, g.values, hyper, rule.kind, name)
        record_update(optimizer, v, g.indices, step)
    if dense:
        with _without_global_clipnorm(optimizer, clipped_globally):
            return keras_apply(optimizer, dense)
    return optimizer.iterations.assign_add(1)


def _optimizer_classes() -> list[type]:
    """The optimizer base classes whose apply_gradients OptimizerScope routes: Keras 3's, and
    with tf_keras installed its optimizers' and its legacy optimizers' (OptimizerV2)."""
    classes = [keras.optimizers.Optimizer]
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
_active_scopes: list = []
_saved_methods: list = []
_scopes_lock = threading.Lock()


def _patch_keras() -> None:
    for cls in _optimizer_classes():
        original = cls.apply_gradients

        def routed(opt, grads_and_vars, *args, _original=original, **kwargs):
            return apply_gradients(
                opt,
                grads_and_vars,
                lambda o, gv: _original(o, gv, *args, **kwargs),
                _is_table,
            )

        _saved_methods.append((cls, "apply_gradients", original))
        cls.apply_gradients = routed
    # Keras 3's other entry point, apply(grads, variables), must route tables too: else Keras
    # updates them itself, with slots of its own (and fails on an empty [0, dim] shard).
    original_apply = keras.optimizers.Optimizer.apply

    def routed_apply(opt, grads, trainable_variables=None, _original=original_apply):
        if trainable_variables is None:
            if not opt.built:
                return _original(opt, grads)  # Keras' own error
            trainable_variables = opt._trainable_variables  # the list it was built with
        return apply_gradients(
            opt,
            zip(grads, trainable_variables),
            lambda o, gv: _original(o, [g for g, _ in gv], [v for _, v in gv]),
            _is_table,
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

    def __init__(self, var_list):
        # Tables are recognised by type, so var_list is only checked: a value that is no
        # variable is a mistake better reported here than ignored.
        if _is_variable(var_list):
            var_list = [var_list]
        for v in var_list:
            if not _is_variable(v):
                raise TypeError(
                    f"OptimizerScope takes variables (sok_lite tables, tf.Variable, "
                    f"keras.Variable), got {type(v).__name__}"
                )

    def __enter__(self):
        with _scopes_lock:
            if not _active_scopes:
                _patch_keras()
            _active_scopes.append(self)
        return self

    def __exit__(self, *exc):
        with _scopes_lock:
            _active_scopes.remove(self)
            if not _active_scopes:
                _restore_keras()
        return False


@contextlib.contextmanager
def _counting_with(optimizer, iterations):
    """The optimizer reads and advances `iterations` as its own for the block (tf_keras and
    legacy optimizers both keep their step counter in `_iterations`)."""
    saved = optimizer._iterations
    optimizer._iterations = iterations
    try:
        yield
    finally:
        optimizer._iterations = saved


class OptimizerWrapper:
    """A Keras optimizer whose apply_gradients routes sok_lite tables to row-wise kernels.

    The object form of OptimizerScope, for code that cannot use a `with` block. For a Keras 3
    optimizer it returns sok_lite.keras.OptimizerWrapper, a Keras optimizer that
    model.compile accepts; for others (tf_keras, and the tf_keras legacy optimizers SOK's
    documentation prescribes on TF >= 2.16: tf_keras.optimizers.legacy.SGD, Adam, Adagrad,
    Ftrl, RMSprop, Adamax, Adadelta) an object whose other attributes (learning_rate,
    iterations, ...) are the wrapped optimizer's.

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

    def __new__(cls, optimizer):
        # A Keras 3 optimizer gets the Keras-native wrapper, which model.compile accepts.
        if isinstance(optimizer, keras.optimizers.Optimizer):
            from sok_lite.keras.optimizer import OptimizerWrapper as KerasOptimizerWrapper

            return KerasOptimizerWrapper(optimizer)
        return super().__new__(cls)

    def __init__(self, optimizer):
        self._optimizer = optimizer
        self._iterations = tf.Variable(
            0,
            dtype=tf.int64,
            trainable=False,
            name="iter",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,  # as Keras' own counter
        )

    @property
    def optimizer(self):
        return self._optimizer

    @property
    def iterations(self) -> tf.Variable:
        """The steps this wrapper has applied (not those the wrapped optimizer took alone)."""
        return self._iterations

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        kwargs.pop("experimental_aggregate_gradients", None)  # SOK-era argument: no meaning here
        keras_apply = type(self._optimizer).apply_gradients
        with _counting_with(self._optimizer, self._iterations):
            return apply_gradients(
                self._optimizer,
                grads_and_vars,
                lambda o, gv: keras_apply(o, gv, *args, **kwargs),
                _is_table,
            )

    def __getattr__(self, name):
        return getattr(self._optimizer, name)
