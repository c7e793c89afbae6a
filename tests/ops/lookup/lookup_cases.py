"""Random lookup inputs and TF's own lookup as the reference, shared by the lookup tests."""

import dataclasses

import numpy as np
import tensorflow as tf

import sok_lite as sok
from tests.common import ragged


@dataclasses.dataclass
class Case:
    tables: list  # numpy [rows, dim]
    ids: list  # per table: list of per-sample id lists
    weights: list  # per table: None or list of per-sample weight lists
    combiners: list
    id_dtype: tf.DType
    value_dtype: tf.DType


def random_case(seed, combiner, weighted, id_dtype, value_dtype=tf.float32, num_tables=None):
    rng = np.random.default_rng(seed)
    n_tables = num_tables or int(rng.integers(1, 4))
    batch = int(rng.integers(1, 12))
    tables, ids, weights = [], [], []
    for _ in range(n_tables):
        rows, dim = int(rng.integers(1, 40)), int(rng.integers(1, 9))
        tables.append(rng.standard_normal([rows, dim]))
        lens = rng.integers(0, 7, size=batch)
        ids.append([rng.integers(0, rows, size=k).tolist() for k in lens])
        # Positive weights: tf.nn.safe_embedding_lookup_sparse drops ids with weight <= 0.
        weights.append([rng.uniform(0.1, 2.0, size=k).tolist() for k in lens] if weighted else None)
    return Case(tables, ids, weights, [combiner] * n_tables, id_dtype, value_dtype)


def as_input(rows, dtype, kind):
    r = ragged(rows, dtype)
    return r if kind == "ragged" else r.to_sparse()


def tf_reference(case, upstream):
    """Forward outputs and dense gradients from tf.nn.safe_embedding_lookup_sparse."""
    variables = [tf.Variable(t, dtype=case.value_dtype) for t in case.tables]
    outs = []
    with tf.GradientTape() as tape:
        loss = 0.0
        for t, var in enumerate(variables):
            sp_ids = ragged(case.ids[t], case.id_dtype).to_sparse()
            sp_w = None
            if case.weights[t] is not None:
                sp_w = ragged(case.weights[t], case.value_dtype).to_sparse()
            out = tf.nn.safe_embedding_lookup_sparse(var, sp_ids, sp_w, combiner=case.combiners[t])
            outs.append(out)
            loss += tf.reduce_sum(out * upstream[t])
    grads = tape.gradient(loss, variables)
    return [o.numpy() for o in outs], [tf.convert_to_tensor(g).numpy() for g in grads]


def lookup_and_gradients(variables, ids, weights, combiners, upstream, use_function=False):
    """sok.lookup_sparse's outputs and the gradients of sum(output * upstream) for `variables`,
    run eagerly or as a tf.function."""

    def step():
        with tf.GradientTape() as tape:
            outs = sok.lookup_sparse(variables, ids, weights, combiners=combiners)
            loss = tf.add_n([tf.reduce_sum(o * u) for o, u in zip(outs, upstream)])
        return outs, tape.gradient(loss, variables)

    return tf.function(step)() if use_function else step()
