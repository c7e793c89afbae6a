"""STEPS Adam steps of a Keras model with hash-table features (hash_features_model.py) on one
process, under MirroredStrategy (2 logical CPUs) or under MultiWorkerMirroredStrategy
(TF_CONFIG); every run sees the same global batches. Writes this process's table rows and the
dense weights for tests/distributed/test_strategy_hash_features.py.

One process and MirroredStrategy train with model.fit; under several workers Keras 3's fit does
not run (see strategy_dlrm_worker.py), so the workers run the same step in a loop of their own.

    python strategy_hash_features_worker.py OUT_DIR {single,mirrored,multi_worker}
"""

import pathlib
import sys

from tests.distributed.workers.strategy_setup import make_strategy

out_dir, kind = pathlib.Path(sys.argv[1]), sys.argv[2]
strategy = make_strategy(kind)

import contextlib  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import sok_lite as sok  # noqa: E402
from sok_lite.comm.shards import ReplicaShards  # noqa: E402
from tests.distributed.workers import hash_features_model as setup  # noqa: E402


def replica_batches(context: tf.distribute.InputContext):
    # One input pipeline per process; its elements go to the process's replicas in turn.
    n = context.num_replicas_in_sync
    per_pipeline = n // context.num_input_pipelines
    ranks = range(
        context.input_pipeline_id * per_pipeline, (context.input_pipeline_id + 1) * per_pipeline
    )
    datasets = [setup.rank_dataset(rank, n) for rank in ranks]
    choice = tf.data.Dataset.range(len(datasets)).repeat(setup.STEPS)
    return tf.data.Dataset.choose_from_datasets(datasets, choice)


with strategy.scope() if strategy else contextlib.nullcontext():
    sok.init()  # "auto": the strategy in scope
    model = setup.build_model()
    model.compile(
        optimizer=sok.keras.OptimizerWrapper(keras.optimizers.Adam(0.05)),
        loss=keras.losses.MeanSquaredError(),
    )
dataset = strategy.distribute_datasets_from_function(replica_batches) if strategy else None


def train_in_loop() -> None:
    """The fit step inside strategy.run."""
    loss_fn = keras.losses.MeanSquaredError(reduction=None)

    @tf.function
    def train_step(iterator):
        def replica_step(features, labels):
            with tf.GradientTape() as tape:
                per_sample = loss_fn(labels, model(features, training=True))
                loss = tf.nn.compute_average_loss(per_sample, global_batch_size=setup.GLOBAL_BATCH)
            weights = model.trainable_variables
            model.optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights))

        strategy.run(replica_step, args=next(iterator))

    iterator = iter(dataset)
    for _ in range(setup.STEPS):
        train_step(iterator)


if kind == "multi_worker":
    train_in_loop()
else:
    data = dataset if strategy else setup.rank_dataset(0, 1)
    model.fit(data, epochs=1, steps_per_epoch=setup.STEPS, verbose=0, shuffle=False)


def shards_and_ranks(table):
    if isinstance(table, ReplicaShards):
        return zip(table.ranks, table.shards)
    return [(sok.rank(), table)]


tables = model.get_layer("features").tables
process = getattr(strategy and strategy.cluster_resolver, "task_id", None) or 0
np.savez(out_dir / f"tables{process}.npz", **setup.table_arrays(tables, shards_and_ranks))
_, dense = sok.filter_variables(model.weights)
np.savez(out_dir / f"dense{process}.npz", *[np.asarray(w.numpy()) for w in dense])
print("iterations", int(model.optimizer.iterations.numpy()), flush=True)
