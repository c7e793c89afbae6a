"""STEPS (3) training steps of the DLRM example model (small sizes) on one process, under
MirroredStrategy (2 logical CPUs) or under MultiWorkerMirroredStrategy (TF_CONFIG); every run
sees the same global batches. Writes this process's table shards and the dense weights for
tests/distributed/test_strategy_dlrm.py.

One process and MirroredStrategy train with model.fit. Under MultiWorkerMirroredStrategy with
several workers, Keras 3's fit fails before the first step for any model (its symbolic build
passes the nested input batch to strategy.reduce, which takes single tensors), so the workers
run the same step in a loop of their own: the loss of the replica's share over the global batch,
gradients, and the optimizer's apply_gradients.

    python strategy_dlrm_worker.py OUT_DIR {single,mirrored,multi_worker}
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "examples" / "dlrm"))

from tests.distributed.workers.strategy_setup import make_strategy, shard_arrays  # noqa: E402

out_dir, kind = pathlib.Path(sys.argv[1]), sys.argv[2]
strategy = make_strategy(kind)

import contextlib  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from data import NUM_CATEGORICAL, NUM_DENSE, CriteoLike, vocabulary_sizes  # noqa: E402
from model import build_dlrm  # noqa: E402

import sok_lite as sok  # noqa: E402

# Few steps: the test compares the weights with one process's to float32 round-off, and Adam's
# per-weight normalised steps let round-off differences grow with every step (measured on the
# tables: an excess over rtol 1e-4 of 3e-8 after 3 steps, 8e-8 after 5, 7e-7 after 20).
STEPS, GLOBAL_BATCH, MAX_VOCABULARY, DIM = 3, 128, 2000, 8

keras.utils.set_random_seed(0)
data = CriteoLike(vocabulary_sizes(MAX_VOCABULARY), seed=0)


def batches(num_ranks: int, ranks):
    """Per step, the shares of `ranks` (in order) of the global batch split over num_ranks."""
    local = GLOBAL_BATCH // num_ranks

    def generate():
        for step in range(STEPS):
            for rank in ranks:
                batch = data.batch(step, GLOBAL_BATCH, rank, num_ranks)
                yield batch.features, batch.labels

    signature = (
        {
            "dense": tf.TensorSpec([local, NUM_DENSE], tf.float32),
            "categorical": tf.TensorSpec([local, NUM_CATEGORICAL], tf.int64),
        },
        tf.TensorSpec([local, 1], tf.float32),
    )
    return tf.data.Dataset.from_generator(generate, output_signature=signature)


def replica_batches(context: tf.distribute.InputContext):
    # One input pipeline per process; its elements go to the process's replicas in turn.
    per_pipeline = context.num_replicas_in_sync // context.num_input_pipelines
    first = context.input_pipeline_id * per_pipeline
    return batches(context.num_replicas_in_sync, range(first, first + per_pipeline))


with strategy.scope() if strategy else contextlib.nullcontext():
    communicator = sok.init()  # "auto": the strategy in scope
    assert (type(communicator).__name__ == "StrategyCommunicator") == (strategy is not None)
    model = build_dlrm(
        data.vocab_sizes.tolist(), embedding_dim=DIM, bottom_units=(16,), top_units=(16,)
    )
    model.compile(
        optimizer=sok.keras.OptimizerWrapper(keras.optimizers.Adam(0.01)),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
    )
if strategy:
    dataset = strategy.distribute_datasets_from_function(replica_batches)
else:
    dataset = batches(1, [0])


def train_in_loop() -> float:
    """The fit step inside strategy.run; returns the global loss of the last step."""
    loss_fn = keras.losses.BinaryCrossentropy(from_logits=True, reduction=None)

    @tf.function
    def train_step(iterator):
        def replica_step(features, labels):
            with tf.GradientTape() as tape:
                per_sample = loss_fn(labels, model(features, training=True))
                loss = tf.nn.compute_average_loss(per_sample, global_batch_size=GLOBAL_BATCH)
            weights = model.trainable_variables
            model.optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights))
            return loss

        losses = strategy.run(replica_step, args=next(iterator))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    iterator = iter(dataset)
    for _ in range(STEPS):
        loss = train_step(iterator)
    return float(loss)


if kind == "multi_worker":
    last_loss = train_in_loop()
else:
    fit = model.fit(dataset, epochs=1, steps_per_epoch=STEPS, verbose=0, shuffle=False)
    last_loss = fit.history["loss"][-1]

tables = model.get_layer("embeddings").tables
_, dense = sok.filter_variables(model.weights)
process = getattr(strategy and strategy.cluster_resolver, "task_id", None) or 0
np.savez(out_dir / f"tables{process}.npz", **shard_arrays(tables))
np.savez(out_dir / f"dense{process}.npz", *[np.asarray(w.numpy()) for w in dense])
print("loss", last_loss, flush=True)
