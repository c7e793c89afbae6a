"""Optimizer slots of sok_lite tables: shaped and placed like the table's local shard."""

import weakref

import tensorflow as tf

from sok_lite._compat import ResourceVariable
from sok_lite.variable import Variable

# optimizer -> {table ref -> {slot name -> slot variable}}
_SLOTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _new_slot(var, name: str, fill: float):
    base = var.name.split(":")[0]
    value = tf.fill(tf.shape(var), tf.cast(fill, var.dtype))
    if isinstance(var, Variable):
        return Variable.local_slot(var, value, f"{base}/{name}")
    return tf.Variable(value, trainable=False, name=f"{base}/{name}")


def get_slots(optimizer, var, specs) -> list:
    """The slots of `var` under `optimizer`, created on first use (outside any tf.function).

    specs: (name, initial value) pairs, in the order the kernel expects.
    """
    per_var = _SLOTS.setdefault(optimizer, {}).setdefault(var.ref(), {})
    missing = [(n, f) for n, f in specs if n not in per_var]
    if missing:
        with tf.init_scope():
            for name, fill in missing:
                per_var[name] = _new_slot(var, name, fill)
    return [per_var[name] for name, _ in specs]


def opt_slots(optimizer, var) -> dict[str, ResourceVariable]:
    """The slots `optimizer` keeps for sok_lite table `var`, by name (empty before first use).

    >>> import keras, numpy as np, sok_lite as sok
    >>> sok.opt_slots(keras.optimizers.Adam(), sok.Variable(np.zeros([2, 2])))
    {}
    """
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # sok_lite.keras wrapper
    return dict(_SLOTS.get(optimizer, {}).get(var.ref(), {}))
