"""Which inputs a Keras model of sok_lite layers takes under a strategy with 2 replicas: a ragged
or sparse keras.Input is refused when the model is built, with a message naming what to feed;
dense padded ids train with fit (MirroredStrategy). Prints one JSON line of findings.

Usage: strategy_inputs_worker.py KIND   (mirrored | multi_worker)
"""

import json
import sys

from tests.distributed.workers.strategy_setup import make_strategy

strategy = make_strategy(sys.argv[1])

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import sok_lite as sok  # noqa: E402

findings = {"replicas": strategy.num_replicas_in_sync}
with strategy.scope():
    sok.init()
    for kind in ("ragged", "sparse"):
        ids = keras.Input(shape=(None,), dtype="int64", **{kind: True})
        try:
            sok.keras.Embedding(100, 4, name=f"{kind}_emb")(ids)
            findings[kind] = "built"
        except ValueError as e:
            findings[kind] = str(e)

if sys.argv[1] == "mirrored":  # Keras' fit does not run under several workers at all
    with strategy.scope():
        ids = keras.Input(shape=(3,), dtype="int64")
        x = sok.keras.Embedding(100, 4, combiner="mean", pad_value=-1)(ids)
        model = keras.Model(ids, keras.layers.Dense(1)(x))
        model.compile(optimizer=sok.OptimizerWrapper(keras.optimizers.SGD(0.1)), loss="mse")
    rng = np.random.default_rng(0)
    dense_ids = rng.integers(-1, 100, size=(64, 3))
    targets = rng.normal(size=(64, 1)).astype("float32")
    data = tf.data.Dataset.from_tensor_slices((dense_ids, targets)).batch(16)
    findings["fit_losses"] = model.fit(data, epochs=2, verbose=0).history["loss"]
print(json.dumps(findings))
