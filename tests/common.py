"""Small functions that test files across tests/ share: ragged id batches, seeded tables, a
table's rows by key, a seeded dense head for Keras models, and a benchmark run."""

import pathlib
import subprocess
import sys

import keras
import numpy as np
import tensorflow as tf


def ragged(rows, dtype=tf.int64) -> tf.RaggedTensor:
    """A [batch, (n)] RaggedTensor of `rows`, a list of lists (empty ones too, or no rows)."""
    if len(rows) == 0:  # tf.ragged.constant cannot tell the rank of []
        return tf.RaggedTensor.from_row_splits(tf.zeros([0], dtype), tf.zeros([1], tf.int64))
    return tf.ragged.constant(rows, dtype=dtype, ragged_rank=1, inner_shape=())


def random_table(seed: int, rows: int, dim: int, dtype=np.float32) -> np.ndarray:
    """[rows, dim] standard normal values, the same for the same seed."""
    return np.random.default_rng(seed).standard_normal([rows, dim]).astype(dtype)


def rows_by_key(table, with_slots: bool = False) -> dict:
    """{key: row} of what a hash table (one shard of it) stores; rows with their optimizer slots
    appended when with_slots."""
    keys, rows = table.export(with_slots=with_slots)
    return dict(zip(keys.numpy().tolist(), rows.numpy()))


def seeded_head(features):
    """Logits of Dense(8, tanh) then Dense(1) over `features`, with seeded initializers: two
    models built alike start alike without copying weights."""
    hidden = keras.layers.Dense(8, "tanh", kernel_initializer=keras.initializers.GlorotUniform(1))
    logits = keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(2))
    return logits(hidden(features))


BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


def run_benchmark(
    script: str, *args: str, timeout: int = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Runs benchmarks/<script> with `args` from the benchmarks folder (in `env`, default this
    process's environment); fails the test unless it exits 0. Returns the finished process
    (stdout and stderr as text)."""
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=BENCHMARKS,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def gradient_row_checks(fn, *specs) -> int:
    """How many checks of a fixed-size table's gradient rows (raw Asserts with their message)
    tf.function `fn`'s graph for `specs` holds."""
    graph = fn.get_concrete_function(*specs).graph
    messages = [
        tf.make_ndarray(op.inputs[1].op.get_attr("value"))
        for op in graph.get_operations()
        if op.type == "Assert" and op.inputs[1].op.type == "Const"
    ]
    return sum(b"gradient rows must lie" in m.item() for m in messages if m.dtype == object)
