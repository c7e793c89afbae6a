"""sok_lite.optimizers.SGD / Adam / ...: Keras optimizers that update sok_lite tables row-wise.

Each is the Keras 3 optimizer of the same name wrapped in sok_lite.keras.OptimizerWrapper (what
sok_lite.OptimizerWrapper returns for a Keras 3 optimizer), so it runs the same
fused kernels as OptimizerScope; dense variables passed to it are updated by Keras.

>>> import numpy as np, tensorflow as tf, sok_lite as sok
>>> table = sok.Variable(np.ones([3, 2]), dtype=tf.float32)
>>> grad = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([1], tf.int64))
>>> _ = sok.optimizers.SGD(0.5).apply_gradients([(grad, table)])
>>> table.numpy().tolist()
[[1.0, 1.0], [0.5, 0.5], [1.0, 1.0]]
"""

import keras

from sok_lite.optim.wrapper import OptimizerWrapper


def _factory(keras_class):
    def make(*args, **kwargs) -> OptimizerWrapper:
        return OptimizerWrapper(keras_class(*args, **kwargs))

    make.__name__ = keras_class.__name__
    make.__doc__ = (
        f"keras.optimizers.{keras_class.__name__}(...) wrapped in sok_lite.keras.OptimizerWrapper."
    )
    return make


SGD = _factory(keras.optimizers.SGD)
Adam = _factory(keras.optimizers.Adam)
AdamW = _factory(keras.optimizers.AdamW)
Adagrad = _factory(keras.optimizers.Adagrad)
RMSprop = _factory(keras.optimizers.RMSprop)
Ftrl = _factory(keras.optimizers.Ftrl)
Adamax = _factory(keras.optimizers.Adamax)
Adadelta = _factory(keras.optimizers.Adadelta)

__all__ = ["SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Ftrl", "Adamax", "Adadelta"]
