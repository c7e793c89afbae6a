"""SOK's classic dense demo, as a SOK user wrote it: only the import differs.

An All2AllDenseEmbedding looks up slot_num x nnz_per_slot ids per sample; 7 Dense(1024) layers and
a Dense(1) logit follow. Each step computes the loss under a GradientTape, applies the embedding
gradients inside `sok.OptimizerScope` and the dense gradients with a dense optimizer. Labels come
from a planted logistic model over the ids, so the loss has something to learn.

    python examples/sok_classic_demo.py
    horovodrun -np 2 -H localhost:2 --gloo python examples/sok_classic_demo.py
    python examples/sok_classic_demo.py --distributed_tool mirrored
    TF_CONFIG=... python examples/sok_classic_demo.py --distributed_tool multiworker  # per worker

Each rank (a Horovod process, or a replica of a tf.distribute strategy) feeds its share of the
global batch; the dense gradients are all-reduced and the initial dense weights are the same on
every rank (Horovod: broadcast from rank 0; strategies: mirrored variables), while the embedding
gradients stay on the rank that owns the rows (the lookup already sent them there).
"""

import argparse
import contextlib
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import sok_lite as sok  # noqa: E402  (SOK: import sparse_operation_kit as sok)

try:
    import horovod.tensorflow as hvd  # noqa: E402
except ImportError:  # one process without Horovod
    hvd = None


class SOKDenseDemo(keras.Model):
    """All2AllDenseEmbedding -> flatten -> num_dense_layers x Dense(units, relu) -> Dense(1)."""

    def __init__(
        self,
        max_vocabulary_size_per_gpu,
        embedding_vec_size,
        slot_num,
        nnz_per_slot,
        num_dense_layers,
        dense_units=1024,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.slot_num = slot_num
        self.nnz_per_slot = nnz_per_slot
        self.embedding_vec_size = embedding_vec_size
        self.embedding_layer = sok.All2AllDenseEmbedding(
            max_vocabulary_size_per_gpu=max_vocabulary_size_per_gpu,
            embedding_vec_size=embedding_vec_size,
            slot_num=slot_num,
            nnz_per_slot=nnz_per_slot,
        )
        self.dense_layers = [
            keras.layers.Dense(dense_units, activation="relu") for _ in range(num_dense_layers)
        ]
        self.out_layer = keras.layers.Dense(1)

    def call(self, inputs, training=True):
        # [batch, slot_num, nnz_per_slot, embedding_vec_size]
        vectors = self.embedding_layer(inputs, training=training)
        hidden = tf.reshape(
            vectors, [-1, self.slot_num * self.nnz_per_slot * self.embedding_vec_size]
        )
        for layer in self.dense_layers:
            hidden = layer(hidden)
        return self.out_layer(hidden)  # [batch, 1] logits


def synthetic_batches(args, vocabulary_size):
    """[steps] of (ids [global_batch, slot_num, nnz_per_slot], labels [global_batch, 1]).

    Labels are drawn from a planted logistic model: each key has a fixed effect, and the logit
    of a sample is the scaled sum of its keys' effects. Every rank draws the same global batches.
    """
    rng = np.random.default_rng(args.seed)
    effects = rng.normal(0.0, 1.0, vocabulary_size)
    shape = [args.steps, args.global_batch_size, args.slot_num, args.nnz_per_slot]
    # Key popularity decays with the key (Zipf-like), as in click logs.
    popularity = 1.0 / (np.arange(vocabulary_size) + 5.0)
    ids = rng.choice(vocabulary_size, size=shape, p=popularity / popularity.sum())
    logits = 3.0 * effects[ids].sum(axis=(2, 3)) / np.sqrt(args.slot_num * args.nnz_per_slot)
    labels = (rng.random(logits.shape) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    return ids.astype(np.int64), labels[..., np.newaxis]


def replicas_line(count: int, kind: str) -> str:
    """How many replicas MirroredStrategy runs and why: one per device of `kind`."""
    plural = "" if count == 1 else "s"
    line = f"MirroredStrategy: {count} replica{plural} ({count} {kind} device{plural}"
    if kind == "CPU" and count == 1:
        line += "; see docs/distributed.md to make 2 logical CPU devices"
    return line + ")"


def make_strategy(distributed_tool: str):
    """The tf.distribute strategy of --distributed_tool, None for Horovod / one process.

    mirrored: one replica per GPU, or per logical CPU device on a machine without GPUs.
    """
    if distributed_tool == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = gpus or tf.config.list_logical_devices("CPU")
        print(replicas_line(len(devices), "GPU" if gpus else "CPU"), flush=True)
        return tf.distribute.MirroredStrategy([d.name for d in devices])
    if distributed_tool == "multiworker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    return None


def main(argv=None):
    """Trains the demo; returns the global loss of every step."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--global_batch_size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--max_vocabulary_size_per_gpu", type=int, default=512)
    parser.add_argument("--slot_num", type=int, default=10, help="feature fields per sample")
    parser.add_argument("--nnz_per_slot", type=int, default=2, help="keys per feature field")
    parser.add_argument("--embedding_vec_size", type=int, default=16)
    parser.add_argument("--num_dense_layers", type=int, default=7)
    parser.add_argument("--dense_units", type=int, default=1024)
    parser.add_argument("--embedding_learning_rate", type=float, default=0.05)
    parser.add_argument("--dense_learning_rate", type=float, default=3e-4)
    parser.add_argument("--print_every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--distributed_tool",
        choices=("horovod", "mirrored", "multiworker"),
        default="horovod",
        help="horovod: one rank per horovodrun process (one process without horovodrun); "
        "mirrored: tf.distribute.MirroredStrategy; multiworker: MultiWorkerMirroredStrategy "
        "(one process per worker, TF_CONFIG set)",
    )
    args = parser.parse_args(argv)

    strategy = make_strategy(args.distributed_tool)
    use_hvd = strategy is None and hvd is not None
    if use_hvd:
        hvd.init()

    def scope():
        return strategy.scope() if strategy else contextlib.nullcontext()

    with scope():
        # Chooses Horovod once hvd.init() has run, else the strategy in scope, else one
        # process, and records the global batch.
        sok.Init(global_batch_size=args.global_batch_size)
    num_ranks = sok.num_ranks()
    local_batch = args.global_batch_size // num_ranks
    keras.utils.set_random_seed(args.seed)

    with scope():
        model = SOKDenseDemo(
            max_vocabulary_size_per_gpu=args.max_vocabulary_size_per_gpu,
            embedding_vec_size=args.embedding_vec_size,
            slot_num=args.slot_num,
            nnz_per_slot=args.nnz_per_slot,
            num_dense_layers=args.num_dense_layers,
            dense_units=args.dense_units,
        )
        emb_opt = keras.optimizers.Adam(args.embedding_learning_rate)
        dense_opt = keras.optimizers.Adam(args.dense_learning_rate)
    loss_fn = keras.losses.BinaryCrossentropy(from_logits=True, reduction=None)

    all_ids, all_labels = synthetic_batches(args, args.max_vocabulary_size_per_gpu * num_ranks)

    def share(rank):  # the samples of `rank` in each global batch
        return slice(rank * local_batch, (rank + 1) * local_batch)

    def replica_loss(labels, logits):
        # This rank's share of the mean over the GLOBAL batch, so that the embedding gradients,
        # which the lookup sums over ranks for each row, are those of the global mean.
        return tf.nn.compute_average_loss(
            loss_fn(labels, logits), global_batch_size=args.global_batch_size
        )

    def rank_step(ids, labels):
        with tf.GradientTape() as tape:
            loss = replica_loss(labels, model(ids, training=True))
        emb_vars, other_vars = sok.split_embedding_variable_from_others(model.trainable_variables)
        emb_grads, grads = tape.gradient(loss, [emb_vars, other_vars])
        # Each rank's loss is its share of the global mean: the sum over ranks of the dense
        # gradients is the gradient of that mean. Embedding gradients are not all-reduced:
        # they already hold every rank's contribution to this rank's rows. (Under a strategy,
        # Keras' apply_gradients sums the dense gradients over replicas itself.)
        if use_hvd:
            grads = hvd.grouped_allreduce(grads, op=hvd.Sum)
            loss = hvd.allreduce(loss, op=hvd.Sum)
        with sok.OptimizerScope(emb_vars):
            emb_opt.apply_gradients(zip(emb_grads, emb_vars))
        dense_opt.apply_gradients(zip(grads, other_vars))
        return loss

    @tf.function
    def train_step(ids, labels):
        if strategy is None:
            return rank_step(ids, labels)
        losses = strategy.run(rank_step, args=(ids, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    def step_inputs(step):
        """This process's inputs of `step`: its share, or one share per local replica."""
        if strategy is None:
            return all_ids[step, share(sok.rank())], all_labels[step, share(sok.rank())]
        return tuple(
            strategy.experimental_distribute_values_from_function(
                lambda ctx, x=x: x[step, share(ctx.replica_id_in_sync_group)]
            )
            for x in (all_ids, all_labels)
        )

    # Creates the weights (on every rank: the lookup is collective) and the dense optimizer's
    # slots, outside the step function (a strategy creates its mirrored variables there).
    with scope():
        if strategy is None:
            model(step_inputs(0)[0])
        else:
            strategy.run(model, args=(step_inputs(0)[0],))
        dense_opt.build(sok.split_embedding_variable_from_others(model.trainable_variables)[1])
    if use_hvd:
        # Keras 3 weights are not tf.Variables, which hvd.broadcast_variables expects.
        _, other_vars = sok.split_embedding_variable_from_others(model.trainable_variables)
        for v in other_vars:
            v.assign(hvd.broadcast(tf.convert_to_tensor(v), root_rank=0))

    if strategy is None:
        first_process = sok.rank() == 0
    else:  # MirroredStrategy has no cluster resolver: a single process
        resolver = strategy.cluster_resolver
        first_process = resolver is None or not resolver.task_id
    losses = []
    for step in range(args.steps):
        loss = float(train_step(*step_inputs(step)))
        losses.append(loss)
        if first_process and ((step + 1) % args.print_every == 0 or step == 0):
            print(f"step {step + 1:4d}  loss {loss:.4f}", flush=True)
    return losses


if __name__ == "__main__":
    main()
