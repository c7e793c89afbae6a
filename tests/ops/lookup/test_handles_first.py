"""Every op checks its table handles (kind, dtype, shape) before it reads its data: a handle
that does not fit is an error even when the data is empty or malformed as well."""

import numpy as np
import pytest
import tensorflow as tf

from sok_lite.ops import exchange_ops, hash_table_ops, lookup_ops
from sok_lite.ops.optimizer_ops import sparse_apply
from sok_lite.tables.initializers import row_initializer

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")

EMPTY = np.array([0], np.int64), np.array([1], np.int64)  # one rank asking nothing of one table


def peers(handle, message, splits, dtype=tf.float32, dynamic=False, dim=2):
    return exchange_ops.gather_for_peers(
        [handle], message, splits, dtype, [dim], [dynamic], ["users"]
    )


@pytest.mark.parametrize(
    "stored, dtype",
    [
        ("float64", tf.float32),
        ("float16", tf.float64),
        ("int32", tf.float32),
        ("float32", tf.float64),
    ],
)
def test_gather_for_peers_refuses_a_table_of_another_dtype_for_an_empty_message(stored, dtype):
    table = tf.Variable(tf.zeros([3, 2], stored))
    name = {"float64": "double", "float16": "half", "float32": "float"}.get(stored, stored)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"users: variable dtype {name} "):
        peers(table.handle, *EMPTY, dtype=dtype)


@pytest.mark.parametrize("stored", ["float16", "bfloat16"])
def test_gather_for_peers_widens_a_16_bit_table_into_float32_rows(stored):
    table = tf.Variable(tf.cast([[1.5, 2.0], [3.0, -4.0]], stored))
    vectors, splits = peers(table.handle, *EMPTY)
    assert vectors.shape == (0,) and splits.numpy().tolist() == [0]
    vectors, splits = peers(table.handle, np.array([1, 1], np.int64), np.array([2], np.int64))
    assert vectors.dtype == tf.float32 and vectors.numpy().tolist() == [3.0, -4.0]


def test_gather_for_peers_reports_the_table_before_a_malformed_message():
    table = tf.Variable(tf.zeros([3, 2], tf.int32))
    malformed = np.array([5, 0], np.int64), np.array([2], np.int64)  # 5 ids announced, none sent
    with pytest.raises(tf.errors.InvalidArgumentError, match="users: variable dtype int32"):
        peers(table.handle, *malformed)
    # A variable given as a hash table (and a hash table as a variable), message empty too.
    with pytest.raises(tf.errors.InvalidArgumentError, match="users: hash tables hold float32"):
        peers(table.handle, *malformed, dtype=tf.float64, dynamic=True)
    with pytest.raises(tf.errors.OpError):
        peers(table.handle, *EMPTY, dynamic=True)
    hashed = hash_table_ops.create_table("handles_first_t", 2, row_initializer(0.5))
    with pytest.raises(tf.errors.OpError):
        peers(hashed, *EMPTY, dynamic=False)
    with pytest.raises(tf.errors.InvalidArgumentError, match="users: dimension mismatch"):
        peers(hashed, *malformed, dynamic=True, dim=3)


def test_gather_rows_checks_every_table_before_any_indices():
    good = tf.Variable(tf.zeros([3, 2]))
    bad = tf.Variable(tf.zeros([3, 2], tf.float64))
    indices = [np.array([7], np.int64), np.array([], np.int64)]  # row 7 of 3: out of range
    with pytest.raises(tf.errors.InvalidArgumentError, match="b: variable dtype double"):
        lookup_ops.gather_rows([good.handle, bad.handle], indices, tf.float32, ["a", "b"])


def test_sparse_apply_checks_the_variable_before_the_gradients():
    table = tf.Variable(tf.zeros([3, 2], tf.int32))
    hyper = np.array([0.1, 0.0], np.float64)
    # No gradient rows; two gradient rows for one index; a hyper vector too short.
    for rows, hyper_ in ((0, hyper), (2, hyper), (1, hyper[:1])):
        grads = np.zeros([rows, 2], np.float32)
        indices = np.zeros([min(rows, 1)], np.int64)
        with pytest.raises(tf.errors.InvalidArgumentError, match="variable dtype int32"):
            sparse_apply(table.handle, [], indices, grads, hyper_, "sgd")


def test_dynamic_lookup_combine_checks_the_table_before_the_ids():
    table = hash_table_ops.create_table("handles_first_c", 4, row_initializer(0.5))
    ids, bad_splits = np.array([1, 2], np.int64), np.array([0, 5], np.int64)
    with pytest.raises(tf.errors.InvalidArgumentError, match="rows have 4 columns"):
        hash_table_ops.lookup_combine(
            table, ids, bad_splits, np.zeros([0], np.float32), 3, "sum", 0
        )
