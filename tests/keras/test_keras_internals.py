"""The Keras and TF internals in sok_lite/_keras_internals.py: fails loudly if one moves."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite import _keras_internals


def test_keras_layers_still_have_a_tracker_with_variable_stores():
    layer = keras.layers.Layer()
    assert {"trainable_variables", "non_trainable_variables"} <= set(layer._tracker.config)
    table = sok.Variable(np.zeros([3, 2]))
    frozen = sok.Variable(np.zeros([3, 2]), trainable=False)
    _keras_internals.track_table(layer, table)
    _keras_internals.track_table(layer, frozen)
    assert [v is table for v in layer.trainable_variables] == [True]
    assert [v is frozen for v in layer.non_trainable_variables] == [True]
    assert table.path == table.name.split(":")[0] and table.regularizer is None


def test_tf_variables_still_read_trainable_from_a_private_attribute():
    table = sok.Variable(np.ones([3, 2]))
    _keras_internals.set_trainable(table, False)
    assert table.trainable is False
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(sok.lookup_sparse(table, tf.ragged.constant([[1]], dtype=tf.int64)))
    assert tape.gradient(loss, table) is None
    _keras_internals.set_trainable(table, True)
    assert table.trainable is True


def test_keras_still_marks_its_shape_only_trace():
    assert _keras_internals.in_symbolic_build() is False
    seen = []

    class Probe(keras.layers.Layer):
        def call(self, x):
            seen.append(_keras_internals.in_symbolic_build())
            return x

    Probe().compute_output_spec(keras.KerasTensor((2, 3)))
    assert seen and all(seen)


def test_built_variables_are_those_the_optimizer_was_built_with():
    weights = [keras.Variable(np.ones([2])), keras.Variable(np.zeros([3]))]
    opt = keras.optimizers.SGD(0.1)
    opt.build(weights)
    assert [v.path for v in _keras_internals.built_variables(opt)] == [w.path for w in weights]


def test_tf_keras_optimizers_still_count_steps_in_a_private_attribute():
    tf_keras = pytest.importorskip("tf_keras")
    for opt in (tf_keras.optimizers.SGD(0.1), tf_keras.optimizers.legacy.SGD(0.1)):
        own = tf.Variable(5, dtype=tf.int64)
        before = int(opt.iterations)
        with _keras_internals.counting_steps_with(opt, own):
            assert opt.iterations is own
            opt.apply_gradients([(tf.ones([2]), tf.Variable(tf.zeros([2])))])
        assert int(own) == 6 and int(opt.iterations) == before


def test_a_loss_scale_optimizer_builds_its_inner_optimizer_from_its_own_build():
    found = []

    class Probe(keras.optimizers.SGD):
        def build(self, variables):
            found.append(_keras_internals.loss_scale_optimizer_building(self))
            super().build(variables)

    inner = Probe(0.1)
    outer = keras.optimizers.LossScaleOptimizer(inner)
    outer.build([keras.Variable(np.ones([2]))])
    assert found == [outer]
    assert _keras_internals.loss_scale_optimizer_building(inner) is None  # not building now


def test_a_loss_scale_optimizer_sets_its_inner_loss_scale_factor_from_its_constructor():
    found = []

    class Probe(keras.optimizers.SGD):
        def __setattr__(self, name, value):
            if name == "loss_scale_factor":
                found.append(_keras_internals.loss_scale_optimizer_building(self))
            super().__setattr__(name, value)

    inner = Probe(0.1)
    assert found == [None]  # Keras' own constructor sets it too
    outer = keras.optimizers.LossScaleOptimizer(inner)
    assert found == [None, outer]


def test_a_loss_scale_optimizer_scales_losses_with_its_own_scale_loss():
    outer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=8.0)
    _keras_internals.replace_scale_loss(outer, lambda loss: loss * 3.0)
    assert float(outer.scale_loss(tf.constant(2.0))) == 6.0
    assert "scale_loss" not in vars(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD()))


def test_a_loss_scale_optimizer_still_asks_its_own_check_finite():
    weight = keras.Variable(np.ones([2], np.float32))
    outer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=8.0)
    outer.build([weight])
    asked = []

    def never_finite(grads):
        asked.append(len(grads))
        return tf.constant(False)

    _keras_internals.replace_finite_check(outer, never_finite)
    outer.apply_gradients([(tf.ones([2]), weight)])
    assert asked == [1]
    np.testing.assert_array_equal(weight.numpy(), [1.0, 1.0])  # the step was skipped
    assert float(outer.dynamic_scale.numpy()) == 4.0
    assert "check_finite" not in vars(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD()))


def test_keras_still_counts_weights_and_makes_slots_where_the_hooks_replace_them(monkeypatch):
    from keras.src.utils import summary_utils

    from sok_lite.keras import _keras_hooks

    # The hooks of this test are undone after it (the process's own stay as they are).
    monkeypatch.setattr(_keras_hooks, "_installed", set())
    for name in ("count_params", "weight_memory_size"):
        monkeypatch.setattr(summary_utils, name, getattr(summary_utils, name))
    add = keras.optimizers.Optimizer.add_variable_from_reference
    monkeypatch.setattr(keras.optimizers.Optimizer, "add_variable_from_reference", add)
    # What count_weights_with replaces: Keras' counts, read from that module when they run.
    assert summary_utils.count_params([keras.Variable(np.zeros([2, 3]))]) == 6
    assert summary_utils.weight_memory_size([keras.Variable(np.zeros([2, 3]), dtype="float32")])
    counted = keras.Variable(np.zeros([4]))
    _keras_hooks.count_weights_with(lambda w: 100 if w is counted else None)
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
    assert layer.count_params() == 8  # Layer.count_params goes through the module
    assert summary_utils.count_params([counted] + layer.weights) == 108
    # What check_slots_with replaces: every built-in optimizer makes its slots through it.
    made = []
    _keras_hooks.check_slots_with(lambda opt, var, slot: made.append(slot))
    keras.optimizers.Adam().build([keras.Variable(np.zeros([2]))])
    keras.optimizers.SGD(momentum=0.5).build([keras.Variable(np.zeros([2]))])
    assert made[:2] == ["momentum", "velocity"] and made[2:] == ["momentum"]
