"""How a stock Keras optimizer maps onto the fused row-wise kernels: which kernel, which slots
(and their initial values), and its hyper-parameters for the current step."""

import dataclasses
from collections.abc import Callable
from typing import TypeAlias

import keras
import tensorflow as tf

from sok_lite._tf_internals import require
from sok_lite.tables.table_kind import HyperParameters, Optimizer


@dataclasses.dataclass(frozen=True)
class Rule:
    """One optimizer's row-wise update (the RowRule that tables apply)."""

    kind: str  # the kernel (kernels/core/optimizer.h)
    slots: tuple[tuple[str, float], ...]  # (slot name, initial value), in kernel order
    params: HyperParameters  # optimizer -> the kernel parameters after lr and decay
    # The optimizer's own per-variable state, slot for slot: what it updates when it applies a
    # table itself (outside OptimizerScope). Keras 3 and tf_keras: the attributes holding one
    # slot list each; tf_keras legacy optimizers: the slot names of get_slot(var, name).
    keras_slots: tuple[str, ...] = ()


def _f(x: float | tf.Tensor) -> tf.Tensor:
    if isinstance(x, (int, float)):  # tf.cast would round a Python float to float32 first
        return tf.constant(float(x), tf.float64)
    return tf.cast(x, tf.float64)


def _step(opt: Optimizer) -> tf.Tensor:
    return _f(opt.iterations) + 1.0


# Where epsilon goes in Adagrad and RMSprop (the kernels' eps_outside parameter).
_EPS_INSIDE, _EPS_OUTSIDE = 0.0, 1.0


# A hyper-parameter of an optimizer, as float64: (optimizer, name) -> scalar.
HyperReader: TypeAlias = Callable[[Optimizer, str], tf.Tensor]


def _attr(opt: Optimizer, name: str) -> tf.Tensor:
    """A hyper-parameter of a Keras 3 or tf_keras optimizer: its attribute."""
    return _f(getattr(opt, name))


# Each kernel's rule, written once: the defaults are what Keras 3 (and tf_keras) optimizers
# hold; the legacy tf_keras optimizers (below) pass how theirs differ. `hyper` reads a
# hyper-parameter (_attr, or the legacy _h) and `own` names the optimizer's own slots, slot for
# slot (Rule.keras_slots); the other arguments are named where they differ.


def _adam(
    opt: Optimizer,
    hyper: HyperReader = _attr,
    own: tuple[str, ...] = ("_momentums", "_velocities", "_velocity_hats"),
) -> Rule:
    slots = (("m", 0.0), ("v", 0.0)) + ((("v_hat", 0.0),) if opt.amsgrad else ())
    return Rule(
        "amsgrad" if opt.amsgrad else "adam",
        slots,
        lambda o: [hyper(o, "beta_1"), hyper(o, "beta_2"), _f(o.epsilon), _step(o)],
        own[: len(slots)],
    )


def _sgd(
    opt: Optimizer,
    hyper: HyperReader = _attr,
    own: tuple[str, ...] = ("momentums",),
    uses_momentum: str = "momentum",
) -> Rule:
    """uses_momentum: the attribute that is true when the optimizer keeps a momentum slot."""
    if not getattr(opt, uses_momentum):
        return Rule("sgd", (), lambda o: [])
    return Rule(
        "nesterov" if opt.nesterov else "momentum",
        (("m", 0.0),),
        lambda o: [hyper(o, "momentum")],
        own,
    )


def _adagrad(
    opt: Optimizer,
    own: tuple[str, ...] = ("_accumulators",),
    initial: str = "initial_accumulator_value",
    eps_place: float = _EPS_INSIDE,
) -> Rule:
    return Rule(
        "adagrad",
        (("accumulator", float(getattr(opt, initial))),),
        lambda o: [_f(o.epsilon), _f(eps_place)],
        own,
    )


def _rmsprop(
    opt: Optimizer,
    hyper: HyperReader = _attr,
    own: tuple[str, ...] = ("_velocities", "_momentums", "_average_gradients"),
    momentum: bool | None = None,
    eps_place: float = _EPS_INSIDE,
) -> Rule:
    """The velocity slot, then momentum and average_gradient where the optimizer keeps them.

    momentum: whether it keeps momentum (None: Keras 3's momentum > 0). Without, the kernel's
    momentum is 0 (it reads only momentum > 0).
    """
    momentum = opt.momentum > 0 if momentum is None else momentum
    kept = (True, momentum, opt.centered)
    names = ("velocity", "momentum", "average_gradient")
    return Rule(
        "rmsprop",
        tuple((name, 0.0) for name, k in zip(names, kept) if k),
        lambda o: [
            hyper(o, "rho"),
            hyper(o, "momentum") if momentum else _f(0.0),
            _f(o.epsilon),
            _f(1.0 if o.centered else 0.0),
            _f(eps_place),
        ],
        tuple(name for name, k in zip(own, kept) if k),
    )


def _ftrl(
    opt: Optimizer,
    hyper: HyperReader = _attr,
    own: tuple[str, ...] = ("_accumulators", "_linears"),
    initial: str = "initial_accumulator_value",
    shrinkage: Callable[[Optimizer], tf.Tensor] | None = None,
) -> Rule:
    """shrinkage: reads l2_shrinkage_regularization_strength (None: through `hyper`)."""
    return Rule(
        "ftrl",
        (("accumulator", float(getattr(opt, initial))), ("linear", 0.0)),
        lambda o: [
            hyper(o, "learning_rate_power"),
            hyper(o, "l1_regularization_strength"),
            hyper(o, "l2_regularization_strength"),
            hyper(o, "beta"),
            hyper(o, "l2_shrinkage_regularization_strength") if shrinkage is None else shrinkage(o),
        ],
        own,
    )


def _adamax(
    opt: Optimizer, hyper: HyperReader = _attr, own: tuple[str, ...] = ("_m", "_u")
) -> Rule:
    return Rule(
        "adamax",
        (("m", 0.0), ("u", 0.0)),
        lambda o: [hyper(o, "beta_1"), hyper(o, "beta_2"), _f(o.epsilon), _step(o)],
        own,
    )


def _adadelta(
    opt: Optimizer,
    hyper: HyperReader = _attr,
    own: tuple[str, ...] = ("_accumulated_grads", "_accumulated_delta_vars"),
) -> Rule:
    return Rule(
        "adadelta",
        (("accumulated_grad", 0.0), ("accumulated_delta_var", 0.0)),
        lambda o: [hyper(o, "rho"), _f(o.epsilon)],
        own,
    )


# Optimizer classes, each with the function that makes the Rule of an instance.
_Makers: TypeAlias = list[tuple[type[object], Callable[[Optimizer], Rule]]]

# Order matters: AdamW is an Adam.
_RULES: _Makers = [
    (keras.optimizers.AdamW, _adam),
    (keras.optimizers.Adam, _adam),
    (keras.optimizers.SGD, _sgd),
    (keras.optimizers.Adagrad, _adagrad),
    (keras.optimizers.RMSprop, _rmsprop),
    (keras.optimizers.Ftrl, _ftrl),
    (keras.optimizers.Adamax, _adamax),
    (keras.optimizers.Adadelta, _adadelta),
]


# --- tf_keras optimizers (tf_keras.optimizers.*, what tf.keras.optimizers is with tf_keras) ----
#
# They share Keras 3's attribute names, slot attributes and, on the rows that have a gradient,
# its equations (epsilon inside the square root for RMSprop, sqrt(acc + eps) for Adagrad).
# Given IndexedSlices, only SGD without momentum and Adagrad stay lazy; the others decay the
# slots of every row at every step (SGD with momentum, RMSprop, Adamax, Adadelta), move every
# row with a non-zero moment (SGD with momentum, RMSprop with momentum, Adamax, Adam), or
# recompute every row from its slots (Ftrl). The row-wise kernels stay lazy: equal to tf_keras
# on rows that have a gradient at every step, and otherwise to the same equations applied to the
# touched rows only.


def _tf_keras_rules() -> _Makers:
    try:
        import tf_keras
    except ImportError:
        return []
    o = tf_keras.optimizers
    # AdamW is no subclass of Adam in tf_keras; its weight decay is the base class' weight_decay.
    return [
        (o.Adam, _adam),
        (o.AdamW, _adam),
        (o.SGD, _sgd),
        (o.Adagrad, _adagrad),
        (o.RMSprop, _rmsprop),
        (o.Ftrl, _ftrl),
        (o.Adamax, _adamax),
        (o.Adadelta, _adadelta),
    ]


# --- tf_keras legacy optimizers (tf_keras.optimizers.legacy.*, OptimizerV2) -------------------
#
# Their hyper-parameters live in _hyper (plain values, tensors, callables or variables) and are
# read with _get_hyper; the learning rate of a step is _decayed_lr, which applies a schedule and
# the legacy `decay` (lr / (1 + decay * iterations)). Equations, as their _resource_apply_sparse:
# - SGD, Adagrad, Ftrl, Adamax, Adadelta, RMSprop with momentum: TF's sparse kernels, which
#   change only the rows with a gradient, as ours do.
# - Adagrad: TF's ApplyAdagradV2, lr * g / (sqrt(acc) + eps) (Keras 3: sqrt(acc + eps)).
# - RMSprop: without momentum lr * g / (sqrt(ms) + eps) (eps outside); with momentum TF's
#   ApplyRMSProp / ApplyCenteredRMSProp, lr * g / sqrt(ms + eps) (eps inside).
# - Adam (and RMSprop without momentum) decay m and v (rms) of every row at every step, and
#   Adam moves every row with a non-zero m: that is not lazy. sok_lite's Adam is "lazy Adam":
#   equal to the legacy optimizer on rows that have a gradient at every step, and otherwise to
#   the same equations applied to the touched rows only.


def legacy_base() -> type[object] | None:
    """tf_keras' legacy optimizer base class (OptimizerV2), or None without tf_keras."""
    try:
        from tf_keras.optimizers.legacy import Optimizer
    except ImportError:
        return None
    base: type[object] = Optimizer
    return base


def make_legacy_variables(optimizer: Optimizer) -> None:
    """Makes a tf_keras legacy optimizer's hyper-parameter variables and step counter, which it
    creates on their first read (the row-wise step reads them); a no-op for other optimizers."""
    if is_legacy(optimizer):
        optimizer._get_hyper("learning_rate")  # creates every hyper-parameter's variable
        _ = optimizer.iterations


def is_legacy(optimizer: Optimizer) -> bool:
    """Whether `optimizer` is a tf_keras legacy one; its rules read names private to tf_keras,
    required here (sok_lite._tf_internals.FEATURES)."""
    base = legacy_base()
    legacy = base is not None and isinstance(optimizer, base)
    if legacy:
        require("tf_keras optimizers")
    return legacy


def _h(opt: Optimizer, name: str) -> tf.Tensor:
    return opt._get_hyper(name, tf.float64)


# The legacy optimizers' rules: the kernels' rules above, given what these optimizers hold
# differently (_momentum: set when momentum is > 0, a tensor or a callable, when momentum slots
# exist).


def _legacy_sgd(opt: Optimizer) -> Rule:
    return _sgd(opt, _h, ("momentum",), uses_momentum="_momentum")


def _legacy_adam(opt: Optimizer) -> Rule:
    return _adam(opt, _h, ("m", "v", "vhat"))


def _legacy_adagrad(opt: Optimizer) -> Rule:
    return _adagrad(opt, ("accumulator",), "_initial_accumulator_value", _EPS_OUTSIDE)


def _legacy_rmsprop(opt: Optimizer) -> Rule:
    # With momentum (opt._momentum), the kernel needs a momentum > 0: a momentum tensor or
    # callable that evaluates to 0 is refused by the kernel (slot count mismatch).
    eps_place = _EPS_INSIDE if opt._momentum else _EPS_OUTSIDE
    return _rmsprop(opt, _h, ("rms", "momentum", "mg"), opt._momentum, eps_place)


def _legacy_ftrl(opt: Optimizer) -> Rule:
    # As the legacy Ftrl reads l2 shrinkage: tf.cast, through float32.
    return _ftrl(
        opt,
        _h,
        ("accumulator", "linear"),
        "_initial_accumulator_value",
        lambda o: tf.cast(o._l2_shrinkage_regularization_strength, tf.float64),
    )


def _legacy_adamax(opt: Optimizer) -> Rule:
    return _adamax(opt, _h, ("m", "v"))


def _legacy_adadelta(opt: Optimizer) -> Rule:
    return _adadelta(opt, _h, ("accum_grad", "accum_var"))


def _legacy_rules() -> _Makers:
    if legacy_base() is None:
        return []
    from tf_keras.optimizers import legacy

    return [
        (legacy.SGD, _legacy_sgd),
        (legacy.Adam, _legacy_adam),
        (legacy.Adagrad, _legacy_adagrad),
        (legacy.RMSprop, _legacy_rmsprop),
        (legacy.Ftrl, _legacy_ftrl),
        (legacy.Adamax, _legacy_adamax),
        (legacy.Adadelta, _legacy_adadelta),
    ]


class WrapsOptimizer:
    """Marks sok_lite's wrappers of an optimizer (sok_lite.keras.OptimizerWrapper,
    sok_lite.optimizer.TFKerasOptimizerWrapper); `optimizer` is the wrapped one."""

    optimizer: Optimizer = None


def unwrap(optimizer: Optimizer) -> Optimizer:
    """The optimizer inside sok_lite's own wrappers (sok_lite.OptimizerWrapper,
    sok_lite.keras.OptimizerWrapper, sok_lite.optimizers.*), or `optimizer` itself.

    Slots, update records and rules belong to the wrapped optimizer: the functions that take
    a user's optimizer (dump, load, opt_slots) look them up through this.
    """
    while isinstance(optimizer, WrapsOptimizer):
        optimizer = optimizer.optimizer
    return optimizer


def rule_for(optimizer: Optimizer) -> Rule:
    """The Rule of `optimizer`.

    Raises:
      ValueError: an optimizer class without a row-wise kernel.
    """
    legacy, tf_keras_rules = _legacy_rules(), _tf_keras_rules()
    for cls, make in _RULES + tf_keras_rules + legacy:
        if isinstance(optimizer, cls):
            return make(optimizer)
    supported = ", ".join(cls.__name__ for cls, _ in _RULES)
    if tf_keras_rules:
        supported += "; tf_keras.optimizers " + ", ".join(cls.__name__ for cls, _ in tf_keras_rules)
    if legacy:
        supported += "; tf_keras.optimizers.legacy " + ", ".join(cls.__name__ for cls, _ in legacy)
    raise ValueError(
        f"{type(optimizer).__module__}.{type(optimizer).__name__} has no row-wise sok_lite "
        f"kernel; supported: keras.optimizers {supported}"
    )


def weight_decay(optimizer: Optimizer) -> tf.Tensor:
    wd = getattr(optimizer, "weight_decay", None)
    return _f(0.0 if wd is None else wd)


def learning_rate(optimizer: Optimizer) -> tf.Tensor:
    """The learning rate of this step (a LearningRateSchedule evaluated at iterations; for a
    tf_keras legacy optimizer also its `decay`)."""
    if is_legacy(optimizer):
        return optimizer._decayed_lr(tf.float64)
    lr = optimizer.learning_rate
    if callable(lr) and not isinstance(lr, (tf.Tensor, tf.Variable)):
        lr = lr(optimizer.iterations)
    return _f(lr)
