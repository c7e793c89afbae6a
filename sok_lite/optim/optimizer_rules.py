"""How a stock Keras optimizer maps onto the fused row-wise kernels: which kernel, which slots
(and their initial values), and its hyper-parameters for the current step."""

import dataclasses
from collections.abc import Callable

import keras
import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Rule:
    kind: str  # the kernel (kernels/core/optimizers.h)
    slots: tuple[tuple[str, float], ...]  # (slot name, initial value), in kernel order
    params: Callable[[object], list]  # optimizer -> the kernel parameters after lr and decay
    # The optimizer's own per-variable state, slot for slot: what it updates when it applies a
    # table itself (outside OptimizerScope). Keras 3 and tf_keras: the attributes holding one
    # slot list each; tf_keras legacy optimizers: the slot names of get_slot(var, name).
    keras_slots: tuple[str, ...] = ()


def _f(x) -> tf.Tensor:
    if isinstance(x, (int, float)):  # tf.cast would round a Python float to float32 first
        return tf.constant(float(x), tf.float64)
    return tf.cast(x, tf.float64)


def _step(opt) -> tf.Tensor:
    return _f(opt.iterations) + 1.0


# Where epsilon goes in Adagrad and RMSprop (the kernels' eps_outside parameter).
_EPS_INSIDE, _EPS_OUTSIDE = 0.0, 1.0


def _adam(opt) -> Rule:
    slots = (("m", 0.0), ("v", 0.0)) + ((("v_hat", 0.0),) if opt.amsgrad else ())
    return Rule(
        "amsgrad" if opt.amsgrad else "adam",
        slots,
        lambda o: [_f(o.beta_1), _f(o.beta_2), _f(o.epsilon), _step(o)],
        ("_momentums", "_velocities", "_velocity_hats")[: len(slots)],
    )


def _sgd(opt) -> Rule:
    if not opt.momentum:
        return Rule("sgd", (), lambda o: [])
    return Rule(
        "nesterov" if opt.nesterov else "momentum",
        (("m", 0.0),),
        lambda o: [_f(o.momentum)],
        ("momentums",),
    )


def _adagrad(opt) -> Rule:
    return Rule(
        "adagrad",
        (("accumulator", float(opt.initial_accumulator_value)),),
        lambda o: [_f(o.epsilon), _f(_EPS_INSIDE)],
        ("_accumulators",),
    )


def _rmsprop(opt) -> Rule:
    slots = (("velocity", 0.0),)
    keras_slots = ("_velocities",)
    if opt.momentum > 0:
        slots += (("momentum", 0.0),)
        keras_slots += ("_momentums",)
    if opt.centered:
        slots += (("average_gradient", 0.0),)
        keras_slots += ("_average_gradients",)
    return Rule(
        "rmsprop",
        slots,
        lambda o: [
            _f(o.rho),
            _f(o.momentum),
            _f(o.epsilon),
            _f(1.0 if o.centered else 0.0),
            _f(_EPS_INSIDE),
        ],
        keras_slots,
    )


def _ftrl(opt) -> Rule:
    return Rule(
        "ftrl",
        (("accumulator", float(opt.initial_accumulator_value)), ("linear", 0.0)),
        lambda o: [
            _f(o.learning_rate_power),
            _f(o.l1_regularization_strength),
            _f(o.l2_regularization_strength),
            _f(o.beta),
            _f(o.l2_shrinkage_regularization_strength),
        ],
        ("_accumulators", "_linears"),
    )


def _adamax(opt) -> Rule:
    return Rule(
        "adamax",
        (("m", 0.0), ("u", 0.0)),
        lambda o: [_f(o.beta_1), _f(o.beta_2), _f(o.epsilon), _step(o)],
        ("_m", "_u"),
    )


def _adadelta(opt) -> Rule:
    return Rule(
        "adadelta",
        (("accumulated_grad", 0.0), ("accumulated_delta_var", 0.0)),
        lambda o: [_f(o.rho), _f(o.epsilon)],
        ("_accumulated_grads", "_accumulated_delta_vars"),
    )


# Order matters: AdamW is an Adam.
_RULES = [
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


def _tf_keras_rules():
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


def legacy_base():
    """tf_keras' legacy optimizer base class (OptimizerV2), or None without tf_keras."""
    try:
        from tf_keras.optimizers.legacy import Optimizer
    except ImportError:
        return None
    return Optimizer


def is_legacy(optimizer) -> bool:
    base = legacy_base()
    return base is not None and isinstance(optimizer, base)


def _h(opt, name: str) -> tf.Tensor:
    return opt._get_hyper(name, tf.float64)


def _legacy_sgd(opt) -> Rule:
    # _momentum: set when momentum is > 0, a tensor or a callable (then momentum slots exist).
    if not opt._momentum:
        return Rule("sgd", (), lambda o: [])
    return Rule(
        "nesterov" if opt.nesterov else "momentum",
        (("m", 0.0),),
        lambda o: [_h(o, "momentum")],
        ("momentum",),
    )


def _legacy_adam(opt) -> Rule:
    slots = (("m", 0.0), ("v", 0.0)) + ((("v_hat", 0.0),) if opt.amsgrad else ())
    return Rule(
        "amsgrad" if opt.amsgrad else "adam",
        slots,
        lambda o: [_h(o, "beta_1"), _h(o, "beta_2"), _f(o.epsilon), _step(o)],
        ("m", "v", "vhat")[: len(slots)],
    )


def _legacy_adagrad(opt) -> Rule:
    return Rule(
        "adagrad",
        (("accumulator", float(opt._initial_accumulator_value)),),
        lambda o: [_f(o.epsilon), _f(_EPS_OUTSIDE)],
        ("accumulator",),
    )


def _legacy_rmsprop(opt) -> Rule:
    # With momentum (opt._momentum), the kernel needs a momentum > 0: a momentum tensor or
    # callable that evaluates to 0 is refused by the kernel (slot count mismatch).
    slots = (("velocity", 0.0),)
    keras_slots = ("rms",)
    if opt._momentum:
        slots += (("momentum", 0.0),)
        keras_slots += ("momentum",)
    if opt.centered:
        slots += (("average_gradient", 0.0),)
        keras_slots += ("mg",)
    eps_place = _EPS_INSIDE if opt._momentum else _EPS_OUTSIDE
    return Rule(
        "rmsprop",
        slots,
        lambda o: [
            _h(o, "rho"),
            _h(o, "momentum") if o._momentum else _f(0.0),
            _f(o.epsilon),
            _f(1.0 if o.centered else 0.0),
            _f(eps_place),
        ],
        keras_slots,
    )


def _legacy_ftrl(opt) -> Rule:
    return Rule(
        "ftrl",
        (("accumulator", float(opt._initial_accumulator_value)), ("linear", 0.0)),
        lambda o: [
            _h(o, "learning_rate_power"),
            _h(o, "l1_regularization_strength"),
            _h(o, "l2_regularization_strength"),
            _h(o, "beta"),
            # As the legacy Ftrl reads it: tf.cast, through float32.
            tf.cast(o._l2_shrinkage_regularization_strength, tf.float64),
        ],
        ("accumulator", "linear"),
    )


def _legacy_adamax(opt) -> Rule:
    return Rule(
        "adamax",
        (("m", 0.0), ("u", 0.0)),
        lambda o: [_h(o, "beta_1"), _h(o, "beta_2"), _f(o.epsilon), _step(o)],
        ("m", "v"),
    )


def _legacy_adadelta(opt) -> Rule:
    return Rule(
        "adadelta",
        (("accumulated_grad", 0.0), ("accumulated_delta_var", 0.0)),
        lambda o: [_h(o, "rho"), _f(o.epsilon)],
        ("accum_grad", "accum_var"),
    )


def _legacy_rules():
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

    optimizer = None


def unwrap(optimizer):
    """The optimizer inside sok_lite's own wrappers (sok_lite.OptimizerWrapper,
    sok_lite.keras.OptimizerWrapper, sok_lite.optimizers.*), or `optimizer` itself.

    Slots, update records and rules belong to the wrapped optimizer: the functions that take
    a user's optimizer (dump, load, opt_slots) look them up through this.
    """
    while isinstance(optimizer, WrapsOptimizer):
        optimizer = optimizer.optimizer
    return optimizer


def rule_for(optimizer) -> Rule:
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


def weight_decay(optimizer) -> tf.Tensor:
    wd = getattr(optimizer, "weight_decay", None)
    return _f(0.0 if wd is None else wd)


def learning_rate(optimizer) -> tf.Tensor:
    """The learning rate of this step (a LearningRateSchedule evaluated at iterations; for a
    tf_keras legacy optimizer also its `decay`)."""
    if is_legacy(optimizer):
        return optimizer._decayed_lr(tf.float64)
    lr = optimizer.learning_rate
    if callable(lr) and not isinstance(lr, (tf.Tensor, tf.Variable)):
        lr = lr(optimizer.iterations)
    return _f(lr)
