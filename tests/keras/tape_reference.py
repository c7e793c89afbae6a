"""The reference the Keras fit tests compare against: a GradientTape loop whose updates are routed
by sok.OptimizerWrapper, one wrapper for the whole loop."""

import keras
import tensorflow as tf

import sok_lite as sok


def manual_training(model, optimizer, data):
    """Trains `model` on (x, y) batches with mean squared error and `optimizer`, wrapped."""
    loss_fn = keras.losses.MeanSquaredError()
    wrapper = sok.OptimizerWrapper(optimizer)
    for x, y in data:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        weights = model.trainable_variables
        wrapper.apply_gradients(zip(tape.gradient(loss, weights), weights))
