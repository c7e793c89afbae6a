"""SokLiteSparseApply's tracker input: the step of each updated row, written in the update's pass
(what incremental dumps read), and refused when it cannot be the table's tracker."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.ops.optimizer_ops import sparse_apply
from sok_lite.optim.slots import update_tracker

ROWS, DIM = 40, 4
ADAM = [0.9, 0.999, 1e-7, 1]


def _adam_inputs(seed: int, num_rows: int = ROWS):
    rng = np.random.default_rng(seed)
    table = tf.Variable(rng.standard_normal([num_rows, DIM]).astype(np.float32))
    slots = [tf.Variable(tf.zeros([num_rows, DIM])) for _ in range(2)]
    hyper = np.array([0.01, 0.0, *ADAM], np.float64)
    return rng, table, slots, hyper


# A few rows, and many: the update's threads each write a long run of entries, prefetched ahead.
@pytest.mark.parametrize("num_rows, per_step", [(ROWS, 12), (60_000, 25_000)])
def test_tracker_holds_each_rows_last_step(num_rows, per_step):
    rng, table, slots, hyper = _adam_inputs(0, num_rows)
    tracker = tf.Variable(tf.fill([num_rows], tf.constant(-1, tf.int64)))
    expected = np.full(num_rows, -1, np.int64)
    for step in (3, 4, 9):
        rows = rng.choice(num_rows, per_step, replace=True).astype(np.int64)  # repeats included
        grads = rng.standard_normal([per_step, DIM]).astype(np.float32)
        sparse_apply(
            table.handle, [s.handle for s in slots], rows, grads, hyper, "adam",
            step=step, trackers=[tracker.handle],
        )  # fmt: skip
        expected[rows] = step
        np.testing.assert_array_equal(tracker.numpy(), expected)


def test_tracker_does_not_change_the_update():
    _, with_tracker, slots_a, hyper = _adam_inputs(1)
    _, without, slots_b, _ = _adam_inputs(1)
    tracker = tf.Variable(tf.fill([ROWS], tf.constant(-1, tf.int64)))
    rows = np.array([5, 7, 5, 30], np.int64)
    grads = np.random.default_rng(2).standard_normal([4, DIM]).astype(np.float32)
    sparse_apply(with_tracker.handle, [s.handle for s in slots_a], rows, grads, hyper, "adam",
                 step=1, trackers=[tracker.handle])  # fmt: skip
    sparse_apply(without.handle, [s.handle for s in slots_b], rows, grads, hyper, "adam", step=1)
    np.testing.assert_array_equal(with_tracker.numpy(), without.numpy())
    for a, b in zip(slots_a, slots_b, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize(
    "make_tracker, message",
    [
        (lambda: tf.Variable(tf.zeros([ROWS], tf.int32)), "must be int64"),
        (lambda: tf.Variable(tf.zeros([ROWS + 1], tf.int64)), "must be int64"),
        (lambda: tf.Variable(tf.zeros([ROWS, 1], tf.int64)), "must be int64"),
    ],
)
def test_bad_tracker_is_refused_and_nothing_changes(make_tracker, message):
    _, table, slots, hyper = _adam_inputs(3)
    tracker = make_tracker()
    before = [v.numpy().copy() for v in (table, *slots, tracker)]
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"variable 'emb'.*{message}"):
        sparse_apply(table.handle, [s.handle for s in slots], np.array([1], np.int64),
                     np.ones([1, DIM], np.float32), hyper, "adam", "emb", step=1,
                     trackers=[tracker.handle])  # fmt: skip
    for got, want in zip((table, *slots, tracker), before, strict=True):
        np.testing.assert_array_equal(got.numpy(), want)


def test_out_of_range_row_leaves_the_tracker_alone():
    _, table, slots, hyper = _adam_inputs(4)
    tracker = tf.Variable(tf.fill([ROWS], tf.constant(-1, tf.int64)))
    with pytest.raises(tf.errors.InvalidArgumentError, match="out of range"):
        sparse_apply(table.handle, [s.handle for s in slots], np.array([2, ROWS], np.int64),
                     np.ones([2, DIM], np.float32), hyper, "adam", step=5,
                     trackers=[tracker.handle])  # fmt: skip
    np.testing.assert_array_equal(tracker.numpy(), np.full(ROWS, -1))


def test_keras_steps_fill_the_tracker_through_the_op():
    """Under OptimizerScope the tracker is written by the update op itself: the graph of a
    step holds no separate scatter into it."""
    table = sok.Variable(np.zeros([ROWS, DIM], np.float32))
    optimizer = keras.optimizers.Adam(0.1)
    rows = tf.constant([3, 8, 3], tf.int64)

    @tf.function
    def step():
        grad = tf.IndexedSlices(tf.ones([3, DIM]), rows, tf.constant([ROWS, DIM], tf.int64))
        with sok.OptimizerScope([table]):
            optimizer.apply_gradients([(grad, table)])

    step()
    step()
    tracker = update_tracker(optimizer, table).numpy()
    expected = np.full(ROWS, -1)
    expected[[3, 8]] = int(optimizer.iterations.numpy())  # the step of the second apply
    np.testing.assert_array_equal(tracker, expected)
    ops = {op.type for op in step.get_concrete_function().graph.get_operations()}
    assert "SokLiteSparseApply" in ops and "ResourceScatterUpdate" not in ops


def test_the_table_as_its_own_tracker_is_refused():
    _, table, slots, hyper = _adam_inputs(5)
    before = table.numpy().copy()
    with pytest.raises(tf.errors.InvalidArgumentError, match="tracker must be int64"):
        sparse_apply(table.handle, [s.handle for s in slots], np.array([1], np.int64),
                     np.ones([1, DIM], np.float32), hyper, "adam", "emb", step=1,
                     trackers=[table.handle])  # fmt: skip
    np.testing.assert_array_equal(table.numpy(), before)
