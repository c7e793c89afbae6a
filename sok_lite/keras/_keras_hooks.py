"""The two places where sok_lite changes Keras 3 for hash tables, each replaced once.

A hash table (sok_lite.DynamicVariable) has no fixed shape: Keras' weight counts multiply each
weight's shape, and a Keras optimizer's slots copy it. sok_lite.keras.tables installs these
hooks when a layer first creates a hash table; tests/keras/test_keras_internals.py fails loudly
if what they replace moves.
"""

import keras
import tensorflow as tf

from sok_lite._tf_internals import require

# The hooks installed so far.
_installed: set = set()


def count_weights_with(values_of) -> None:
    """Makes Keras count a weight's values as `values_of(weight)` where that is not None (else
    as Keras does, the product of its shape): in Layer.count_params() (model.count_params()
    included) and in the totals and memory sizes of model.summary().

    Keras counts in keras.src.utils.summary_utils.count_params and weight_memory_size (bytes),
    private to Keras, which count_params() and print_summary() look up in that module each
    time they run; both are replaced, in that module only.
    """
    if "count" in _installed:
        return
    require("hash tables in sok_lite.keras layers (weight counts of model.summary())")
    _installed.add("count")
    from keras.src.utils import summary_utils

    keras_count, keras_memory = summary_utils.count_params, summary_utils.weight_memory_size

    def split(weights) -> tuple[list, list]:
        values = [(w, values_of(w)) for w in weights]
        return [w for w, n in values if n is None], [(w, n) for w, n in values if n is not None]

    def count_params(weights):
        others, counted = split(weights)
        return keras_count(others) + sum(n for _, n in counted)

    def weight_memory_size(weights):
        others, counted = split({id(w): w for w in weights}.values())  # each weight once
        return keras_memory(others) + sum(n * tf.as_dtype(w.dtype).size for w, n in counted)

    summary_utils.count_params = count_params
    summary_utils.weight_memory_size = weight_memory_size


def check_slots_with(check) -> None:
    """Makes every Keras 3 optimizer call `check(optimizer, variable, slot_name)` before it
    creates a slot shaped like `variable`; `check` raises to refuse the slot.

    Keras' optimizers create their slots (momentums, velocities, accumulators, ...) in build()
    through the public keras.optimizers.Optimizer.add_variable_from_reference, which is
    replaced, for every optimizer class, by one that checks and then calls it.
    """
    if "slots" in _installed:
        return
    _installed.add("slots")
    keras_add = keras.optimizers.Optimizer.add_variable_from_reference

    def add_variable_from_reference(self, reference_variable, name=None, initializer="zeros"):
        check(self, reference_variable, name)
        return keras_add(self, reference_variable, name=name, initializer=initializer)

    keras.optimizers.Optimizer.add_variable_from_reference = add_variable_from_reference
