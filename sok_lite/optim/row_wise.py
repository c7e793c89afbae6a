"""Row-wise routing of optimizer steps: the (gradient, table) pairs of sok_lite tables go to
the tables' row-wise kernels, driven by the optimizer's own hyper-parameters; every other pair
goes to Keras. OptimizerScope, sok_lite.OptimizerWrapper and sok_lite.keras.OptimizerWrapper
all step through `apply_gradients` here.
"""

import contextlib
from collections.abc import Callable, Iterable, Iterator

import keras
import tensorflow as tf

from sok_lite import comm
from sok_lite._errors import table_label
from sok_lite._tf_internals import check_numerics_enabled
from sok_lite.comm.shards import ReplicaShards, local_shard
from sok_lite.optim.eager_build import init_scope_variables_made_now, variables_made_now
from sok_lite.optim.optimizer_rules import (
    learning_rate,
    make_legacy_variables,
    rule_for,
    weight_decay,
)
from sok_lite.optim.slots import knows_variable
from sok_lite.tables.table_dtypes import row_dtype
from sok_lite.tables.table_kind import Optimizer, TableKind

# A (gradient, variable) pair as Keras' apply_gradients takes it.
GradAndVar = tuple[tf.Tensor | tf.IndexedSlices | None, tf.Variable]
# How the optimizer applies the pairs that are not sok_lite tables: (optimizer, pairs) -> op.
KerasApply = Callable[[Optimizer, list[GradAndVar]], tf.Operation]


def filter_variables(
    variables: Iterable[tf.Variable],
) -> tuple[list[tf.Variable], list[tf.Variable]]:
    """Splits variables into (sok_lite tables, everything else), keeping their order.

    >>> import numpy as np, tensorflow as tf, sok_lite as sok
    >>> ours, others = sok.filter_variables([sok.Variable(np.zeros([2, 2])), tf.Variable(1.0)])
    >>> len(ours), len(others)
    (1, 1)
    """
    ours: list[tf.Variable] = []
    others: list[tf.Variable] = []
    for v in variables:
        (ours if is_table(v) else others).append(v)
    return ours, others


def is_table(var: object) -> bool:
    """Whether `var` is a sok_lite table (or the per-replica shards of one)."""
    return isinstance(var, (TableKind, ReplicaShards))


def is_variable(value: object) -> bool:
    """Whether `value` is a variable: a sok_lite table, a tf.Variable or a keras.Variable."""
    return is_table(value) or isinstance(value, (tf.Variable, keras.Variable))


def _as_rows(grad: tf.Tensor | tf.IndexedSlices, var: TableKind) -> tf.IndexedSlices:
    """The gradient as IndexedSlices over local rows, checked against the table."""
    name = table_label(var)
    if isinstance(grad, tf.IndexedSlices):
        values, indices = grad.values, tf.cast(grad.indices, tf.int64)
    elif var.kind == "hash":
        # A dense tensor numbers its rows 0, 1, ...; a hash table's rows are its keys.
        raise ValueError(
            f"gradient of '{name}' is a dense {type(grad).__name__}: a hash table takes a "
            "tf.IndexedSlices over its keys (as tf.gather, tf.nn.embedding_lookup and "
            "sok.lookup_sparse give), since a dense gradient's row i is not key i"
        )
    else:
        values = tf.convert_to_tensor(grad)
        indices = tf.range(tf.shape(values, out_type=tf.int64)[0])
    if values.dtype != row_dtype(var.dtype):  # float32 for a 16-bit table
        raise ValueError(
            f"gradient of '{name}' has dtype {values.dtype.name}, the table's rows "
            f"{row_dtype(var.dtype).name}"
        )
    if values.shape.rank != 2 or not values.shape[1:].is_compatible_with(var.shape[1:]):
        raise ValueError(f"gradient of '{name}' has shape {values.shape}, the table {var.shape}")
    if check_numerics_enabled():
        # tf.debugging.enable_check_numerics() checks op outputs; the row-wise kernels update
        # in place and output nothing, so what they are about to apply is checked here.
        values = tf.debugging.check_numerics(
            values, f"gradient of '{name}' given to {var.apply_op}"
        )
    return var.gradient_rows(values, indices)


def _divided(grad: tf.IndexedSlices, divisor: float | tf.Tensor) -> tf.IndexedSlices:
    values = grad.values / tf.cast(divisor, grad.values.dtype)
    return tf.IndexedSlices(values, grad.indices, grad.dense_shape)


def _sq_norm(values: tf.Tensor) -> tf.Tensor:
    return tf.reduce_sum(tf.square(tf.cast(values, tf.float32)))


def _clip(
    optimizer: Optimizer, ours: list[tuple[tf.IndexedSlices, TableKind]], dense: list[GradAndVar]
) -> tuple[list[tuple[tf.IndexedSlices, TableKind]], list[GradAndVar], bool]:
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

        def scaled(g: tf.Tensor | tf.IndexedSlices) -> tf.Tensor | tf.IndexedSlices:
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
def _without_global_clipnorm(optimizer: Optimizer, active: bool) -> Iterator[None]:
    if not active:
        yield
        return
    saved = optimizer.global_clipnorm
    optimizer.global_clipnorm = None
    try:
        yield
    finally:
        optimizer.global_clipnorm = saved


def _check_keras_knows(optimizer: Optimizer, dense: list[GradAndVar]) -> None:
    """A built Keras 3 optimizer refuses, in its apply(), a variable it was not built with.
    That is checked before any table row changes, so that the refused call changes nothing."""
    if not isinstance(optimizer, keras.optimizers.Optimizer) or not optimizer.built:
        return
    for _, v in dense:
        if not knows_variable(optimizer, v):
            raise ValueError(
                f"apply_gradients: {type(optimizer).__name__} '{optimizer.name}' was built "
                f"without variable '{getattr(v, 'path', v.name)}' and applies only the variables "
                "it was built with (as Keras refuses it); make a new optimizer for a new set of "
                "variables. Nothing was applied"
            )


def _rows_checked(ours: list[tuple[tf.IndexedSlices, TableKind]]) -> list[tf.Operation]:
    """Checks the gradient rows of every fixed-size table before anything of the call changes.

    Each table's kernel checks its own rows before it writes, but the tables of one call are
    updated one after the other (eagerly) or side by side (in a graph), beside Keras' update of
    the dense weights and the step counter: a row past one table would leave the others
    updated. Eagerly a bad row raises here; in a graph every update of the call waits for the
    returned checks. (A hash table's rows are keys: any int64. In a graph, rows that come
    straight from a lookup's dedup were checked by it.)
    """
    checks = []
    for g, v in ours:
        if v.kind != "static":
            continue
        rows = int(v.shape[0])
        if not tf.executing_eagerly() and _checked_by_lookup(g.indices, rows):
            continue
        low, high = tf.reduce_min(g.indices), tf.reduce_max(g.indices)  # empty: both pass
        in_range = tf.logical_and(low >= 0, high < rows)
        label = f"variable '{table_label(v)}'"
        if tf.executing_eagerly():
            if not bool(in_range):
                bad = int(low) if int(low) < 0 else int(high)
                message = f"{label}: gradient row {bad} is out of range [0, {rows})"
                raise tf.errors.InvalidArgumentError(None, None, message)
            continue
        message = f"{label}: gradient rows must lie in [0, {rows}); got rows from"
        # The raw op: tf.debugging.Assert would add a cond around it for int64 data.
        checks.append(tf.raw_ops.Assert(condition=in_range, data=[message, low, "to", high]))
    return checks


def _checked_by_lookup(indices: tf.Tensor, rows: int) -> bool:
    """Whether graph tensor `indices` is, through identities, the distinct ids a lookup's
    dedup (SokLiteUniqueIds) output for a table of at most `rows` rows: its kernel has already
    refused any id outside that range, so checking them again would only cost ops a step."""
    t = indices
    while tf.is_symbolic_tensor(t) and t.op.type == "Identity":
        t = t.op.inputs[0]
    if not tf.is_symbolic_tensor(t):  # an eager tensor the graph captured
        return False
    op = t.op
    if op.type != "SokLiteUniqueIds" or t.value_index >= op.get_attr("N"):
        return False  # any other source, or the dedup's inverse
    checked: int = op.get_attr("num_rows")[t.value_index]
    return 0 <= checked <= rows


def _keras_apply_outside_trace(
    optimizer: Optimizer, dense: list[GradAndVar], keras_apply: KerasApply
) -> tf.Operation:
    """keras_apply(optimizer, dense), with the variables the optimizer builds made eagerly.

    A custom loop's tf.function applies the optimizer while it traces the step; variables made
    there belong to that trace, and tf.function traces the whole step a second time to leave
    them out. A Keras 3 optimizer is built here first, on the pairs it is given, as its apply()
    would; tf_keras optimizers build under a tf.init_scope of their own, made eagerly too
    (see eager_build). So the step traces once.
    """
    if isinstance(optimizer, keras.optimizers.Optimizer) and not optimizer.built:
        with variables_made_now(), keras.name_scope(optimizer.name, caller=optimizer):
            optimizer.build([v for _, v in dense])
    with init_scope_variables_made_now():
        return keras_apply(optimizer, dense)


def apply_gradients(
    optimizer: Optimizer,
    grads_and_vars: Iterable[GradAndVar],
    keras_apply: KerasApply,
    is_ours: Callable[[object], bool],
) -> tf.Operation:
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
    _check_keras_knows(optimizer, dense)
    loss_scale_factor = getattr(optimizer, "loss_scale_factor", None)
    if ours and loss_scale_factor:
        # Keras unscales the other gradients in its own apply(), before clipping.
        ours = [(_divided(g, loss_scale_factor), v) for g, v in ours]
    if not ours:
        if not dense:  # nothing but tables without a gradient: the step still counts
            return optimizer.iterations.assign_add(1)
        return _keras_apply_outside_trace(optimizer, dense, keras_apply)
    with variables_made_now():  # not inside the trace: see _keras_apply_outside_trace
        make_legacy_variables(optimizer)
    rule = rule_for(optimizer)
    with tf.control_dependencies(_rows_checked(ours)):
        ours, dense, clipped_globally = _clip(optimizer, ours, dense)
        hyper = tf.stack(
            [learning_rate(optimizer), weight_decay(optimizer)] + rule.params(optimizer)
        )
        for g, v in ours:
            step = tf.cast(optimizer.iterations, tf.int64) + 1
            v.apply_rows(optimizer, rule, g, hyper, step)
        if dense:
            with _without_global_clipnorm(optimizer, clipped_globally):
                return _keras_apply_outside_trace(optimizer, dense, keras_apply)
        return optimizer.iterations.assign_add(1)
