"""Lookups and SGD row updates from 8 threads at once on the same tables.

The loss is linear in the looked-up embeddings, so every step's gradient depends on its ids
only, never on the table values it read; SGD updates are then plain sums, which commute. Run in
any interleaving, the steps must leave the tables as a sequential replay does, up to float
rounding of the summation order. A lost update, a torn row or a row created twice would not.
"""

import threading
from concurrent.futures import ThreadPoolExecutor

import keras
import numpy as np
import tensorflow as tf

import sok_lite as sok

THREADS, STEPS, BATCH = 8, 20, 16
ROWS, DIM, DYN_DIM = 50, 8, 4
KEY_SPACE = 300  # enough keys that threads keep creating hash-table rows while others read
LR = 0.05
IDS_SPEC = tf.RaggedTensorSpec([None, None], tf.int64, ragged_rank=1)
INITIAL = np.random.default_rng(0).normal(size=[ROWS, DIM]).astype(np.float32)


def batches(thread: int) -> list[tuple[tf.RaggedTensor, tf.RaggedTensor]]:
    """The (static ids, dynamic keys) batches of one thread, from its own seed."""
    rng = np.random.default_rng(1000 + thread)
    out = []
    for _ in range(STEPS):
        lengths = rng.integers(0, 5, BATCH)
        static = rng.integers(0, ROWS, lengths.sum())
        keys = rng.integers(-KEY_SPACE // 2, KEY_SPACE // 2, lengths.sum()) * 7919  # sparse keys
        out.append(
            (
                tf.RaggedTensor.from_row_lengths(static, lengths),
                tf.RaggedTensor.from_row_lengths(keys, lengths),
            )
        )
    return out


def make_tables():
    table = sok.Variable(INITIAL, name="static")
    dynamic = sok.DynamicVariable(
        DYN_DIM, initializer=keras.initializers.RandomNormal(seed=7), name="dynamic"
    )
    return table, dynamic


def make_step(table, dynamic, optimizer):
    """A traced train step; it must be traced inside OptimizerScope to route the updates."""
    coef = tf.constant(np.linspace(-1.0, 1.0, DIM), tf.float32)
    dyn_coef = tf.constant(np.linspace(0.5, 2.0, DYN_DIM), tf.float32)

    @tf.function(input_signature=[IDS_SPEC, IDS_SPEC])
    def step(ids, keys):
        with tf.GradientTape() as tape:
            out, dyn_out = sok.lookup_sparse([table, dynamic], [ids, keys], combiners="mean")
            loss = tf.reduce_sum(out * coef) + tf.reduce_sum(dyn_out * dyn_coef)
        grads = tape.gradient(loss, [table, dynamic])
        optimizer.apply_gradients(zip(grads, [table, dynamic]))
        return tf.reduce_all(tf.math.is_finite(out)) & tf.reduce_all(tf.math.is_finite(dyn_out))

    step.get_concrete_function()
    return step


def end_state(table, dynamic):
    keys, values = dynamic.export()
    order = np.argsort(keys.numpy())
    return table.numpy(), keys.numpy()[order], values.numpy()[order]


def test_concurrent_steps_equal_a_sequential_replay():
    work = [batches(t) for t in range(THREADS)]

    # Sequential replay: thread 0's steps, then thread 1's, ...
    replay_tables = make_tables()
    with sok.OptimizerScope(list(replay_tables)):
        step = make_step(*replay_tables, keras.optimizers.SGD(LR))
        for thread_batches in work:
            for ids, keys in thread_batches:
                assert step(ids, keys)
    expected = end_state(*replay_tables)

    # The same steps from 8 threads on one pair of tables and one optimizer.
    tables = make_tables()
    start = threading.Barrier(THREADS)

    def run(thread_batches):
        start.wait()  # all threads start together, so their steps overlap
        return all(bool(step(ids, keys)) for ids, keys in thread_batches)

    with sok.OptimizerScope(list(tables)):
        step = make_step(*tables, keras.optimizers.SGD(LR))
        with ThreadPoolExecutor(THREADS) as pool:
            finite = list(pool.map(run, work))
    assert all(finite), "a concurrent lookup read a non-finite (torn or uninitialized) row"

    got = end_state(*tables)
    np.testing.assert_array_equal(got[1], expected[1])  # the same keys were created, once each
    # Only the order of the summed updates differs: float rounding, relative to the values,
    # plus an absolute floor for entries that cancel to about zero.
    for actual, wanted in [(got[0], expected[0]), (got[2], expected[2])]:
        np.testing.assert_allclose(actual, wanted, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got[0], INITIAL), "the steps changed nothing"
