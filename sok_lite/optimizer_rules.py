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
    # The Keras optimizer's own per-variable slot lists holding the same state, slot for slot:
    # what Keras updates when it applies a table itself (outside OptimizerScope).
    keras_slots: tuple[str, ...] = ()


def _f(x) -> tf.Tensor:
    return tf.cast(x, tf.float64)


def _step(opt) -> tf.Tensor:
    return _f(opt.iterations) + 1.0


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
        lambda o: [_f(o.epsilon)],
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
        lambda o: [_f(o.rho), _f(o.momentum), _f(o.epsilon), _f(1.0 if o.centered else 0.0)],
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


# Order matters: AdamW is an Adam.
_RULES = [
    (keras.optimizers.AdamW, _adam),
    (keras.optimizers.Adam, _adam),
    (keras.optimizers.SGD, _sgd),
    (keras.optimizers.Adagrad, _adagrad),
    (keras.optimizers.RMSprop, _rmsprop),
    (keras.optimizers.Ftrl, _ftrl),
]


def _legacy_rules():
    """tf_keras (TF_USE_LEGACY_KERAS=1) optimizers share the attribute names we read."""
    try:
        import tf_keras
    except ImportError:
        return []
    return [
        (tf_keras.optimizers.Adam, _adam),
        (tf_keras.optimizers.SGD, _sgd),
        (tf_keras.optimizers.Adagrad, _adagrad),
    ]


def unwrap(optimizer):
    """The Keras optimizer inside sok_lite's own wrappers (sok_lite.OptimizerWrapper,
    sok_lite.keras.OptimizerWrapper, sok_lite.optimizers.*), or `optimizer` itself.

    Slots, update records and rules belong to the wrapped optimizer: the functions that take
    a user's optimizer (dump, load, opt_slots) look them up through this.
    """
    # Imported here: both wrapper modules import this one.
    from sok_lite.keras.optimizer import OptimizerWrapper as KerasOptimizerWrapper
    from sok_lite.optimizer import OptimizerWrapper

    while True:
        if isinstance(optimizer, KerasOptimizerWrapper):
            optimizer = optimizer.inner_optimizer
        elif isinstance(optimizer, OptimizerWrapper):
            optimizer = optimizer.optimizer
        else:
            return optimizer


def rule_for(optimizer) -> Rule:
    """The Rule of `optimizer`.

    Raises:
      ValueError: an optimizer class without a row-wise kernel.
    """
    for cls, make in _RULES + _legacy_rules():
        if isinstance(optimizer, cls):
            return make(optimizer)
    supported = ", ".join(cls.__name__ for cls, _ in _RULES)
    raise ValueError(
        f"{type(optimizer).__name__} has no row-wise sok_lite kernel; supported: {supported}"
    )


def weight_decay(optimizer) -> tf.Tensor:
    wd = getattr(optimizer, "weight_decay", None)
    return _f(0.0 if wd is None else wd)


def learning_rate(optimizer) -> tf.Tensor:
    """The learning rate of this step (a LearningRateSchedule evaluated at iterations)."""
    lr = optimizer.learning_rate
    if callable(lr) and not isinstance(lr, (tf.Tensor, tf.Variable)):
        lr = lr(optimizer.iterations)
    return _f(lr)
