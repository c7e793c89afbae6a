"""In a traced apply_gradients, a fixed-size table's gradient rows are checked before any update
of the call, unless they come straight from a lookup's dedup, whose kernel has already refused
every id outside the table: those rows cost no check ops a step.

(The refused calls themselves, on every table kind and both routes, are in
tests/robustness/failure_registry.py.)"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite._tf_internals import static_rows
from tests.common import gradient_row_checks, random_table

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")

DIM = 3
ROUTES = ["scope", "wrapper"]


def _applier(route, tables):
    """apply(pairs): SGD through `route`."""
    optimizer = keras.optimizers.SGD(0.1)
    if route == "wrapper":
        return sok.OptimizerWrapper(optimizer).apply_gradients

    def apply(pairs):
        with sok.OptimizerScope(tables):
            optimizer.apply_gradients(pairs)

    return apply


def _ragged(rows):
    return tf.RaggedTensorSpec([None, None], tf.int64), tf.ragged.constant(rows, dtype=tf.int64)


def _dense(rows):
    return tf.TensorSpec([None, 1], tf.int64), tf.constant(rows, tf.int64)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    "make_ids, rows", [(_ragged, [[0, 5], [9]]), (_dense, [[5], [9]])], ids=["ragged", "one_id"]
)
def test_rows_from_the_lookup_add_no_check_and_train_as_eagerly(route, make_ids, rows):
    spec, batch = make_ids(rows)

    def trained(traced):
        tables = [sok.Variable(random_table(s, 10, DIM)) for s in (1, 2)]
        apply = _applier(route, tables)

        def step(x):
            with tf.GradientTape() as tape:
                out = sok.lookup_sparse(tables, [x, x], combiners=["sum", "mean"])
                loss = tf.reduce_sum(out[0] * out[1])
            apply(list(zip(tape.gradient(loss, tables), tables)))

        fn = tf.function(step, input_signature=[spec])
        if traced:
            assert gradient_row_checks(fn, spec) == 0
        (fn if traced else step)(batch)
        return [t.numpy() for t in tables]

    for got, want in zip(trained(True), trained(False), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("make_ids", [_ragged, _dense], ids=["ragged", "one_id"])
def test_rows_from_a_larger_tables_lookup_are_still_checked(route, make_ids):
    """A lookup's rows applied to a smaller table: its dedup only checked them against the
    larger one. A row past the small table refuses the call before anything changes."""
    large = sok.Variable(random_table(1, 10, DIM))
    small = sok.Variable(random_table(2, 4, DIM))
    spec, _ = make_ids([[1]])
    apply = _applier(route, [large, small])

    @tf.function(input_signature=[spec])
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(sok.lookup_sparse(large, x))
        g = tape.gradient(loss, large)
        apply([(g, large), (g, small)])

    # The small table's check; the large one's rows were checked by its lookup.
    assert gradient_row_checks(step, spec) == 1
    step(make_ids([[1], [3]])[1])  # within both tables
    before = [large.numpy(), small.numpy()]
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"gradient rows must lie in \[0, 4\)"):
        step(make_ids([[1], [7]])[1])
    for t, want in zip([large, small], before, strict=True):
        np.testing.assert_array_equal(t.numpy(), want)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("captured", [False, True], ids=["made_in_graph", "captured"])
def test_rows_made_by_hand_are_checked(route, captured):
    """Rows that no lookup checked: a tensor of the graph, or an eager one the graph captures."""
    table = sok.Variable(random_table(1, 4, DIM))
    outside = tf.constant([1, 4], tf.int64)
    apply = _applier(route, [table])
    spec = tf.TensorSpec([2, DIM], tf.float32)

    @tf.function(input_signature=[spec])
    def step(values):
        rows = outside if captured else tf.constant([1, 4], tf.int64)
        apply([(tf.IndexedSlices(values, rows, tf.constant([4, DIM], tf.int64)), table)])

    assert gradient_row_checks(step, spec) == 1
    before = table.numpy()
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"gradient rows must lie in \[0, 4\)"):
        step(tf.ones([2, DIM]))
    np.testing.assert_array_equal(table.numpy(), before)


def test_static_rows_reads_a_graph_handle_and_knows_when_it_cannot():
    known = tf.Variable(tf.zeros([5, 2]))
    unknown = tf.Variable(tf.zeros([5, 2]), shape=tf.TensorShape([None, 2]))
    seen = []

    @tf.function
    def read():
        for v in (known, unknown):
            value = tf.raw_ops.ReadVariableOp(resource=v.handle, dtype=tf.float32)
            seen.append(static_rows(value.op.inputs[0]))  # the handle as the graph holds it

    read.get_concrete_function()
    assert seen == [5, -1]
    assert static_rows(known.handle) == -1  # an eager handle
