"""A small training setup with every kind of table, shared by the checkpoint tests and workers."""

import keras
import numpy as np
import tensorflow as tf

import sok_lite as sok


def make_tables(num_ranks: int):
    users = sok.Variable(
        shape=[23, 4], initializer=keras.initializers.RandomNormal(seed=1), name="users"
    )
    items = sok.Variable(
        shape=[9, 3],
        initializer=keras.initializers.RandomUniform(seed=2),
        mode=f"localized:{num_ranks - 1}",
        name="items",
    )
    clicks = sok.DynamicVariable(
        5, initializer=keras.initializers.RandomNormal(seed=3), name="clicks"
    )
    return [users, items, clicks]


def batch(step: int, rank: int, num_ranks: int, size: int = 8):
    rng = np.random.default_rng(step)
    ids = [
        [rng.integers(0, 23, size=k).tolist() for k in rng.integers(0, 4, size=size)],
        [rng.integers(0, 9, size=k).tolist() for k in rng.integers(1, 3, size=size)],
        [(rng.integers(-50, 50, size=k) * 2**40).tolist() for k in rng.integers(0, 3, size=size)],
    ]
    lo, hi = size * rank // num_ranks, size * (rank + 1) // num_ranks
    return [
        tf.ragged.constant(x[lo:hi], dtype=tf.int64, ragged_rank=1, inner_shape=()) for x in ids
    ]


def train(tables, optimizer, steps, rank=0, num_ranks=1, first_step=0):
    for step in range(first_step, first_step + steps):
        inputs = batch(step, rank, num_ranks)
        with tf.GradientTape() as tape:
            outs = sok.lookup_sparse(tables, inputs, combiners=["sum", "mean", "sqrtn"])
            loss = tf.add_n([tf.reduce_sum(o * o) for o in outs])
        grads = tape.gradient(loss, tables)
        with sok.OptimizerScope(tables):
            optimizer.apply_gradients(zip(grads, tables))


def state(tables, optimizer) -> dict:
    """Every number of this rank: table rows, slots, optimizer step (dynamic rows by key)."""
    out = {"iterations": int(optimizer.iterations.numpy())}
    for t in tables:
        if isinstance(t, sok.DynamicVariable):
            keys, rows = t.export(with_slots=True)
            order = np.argsort(keys.numpy())
            out[t.name] = (keys.numpy()[order], rows.numpy()[order])
        else:
            out[t.name] = t.numpy()
            for name, slot in sok.opt_slots(optimizer, t).items():
                out[f"{t.name}/{name}"] = slot.numpy()
    return out
