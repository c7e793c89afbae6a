"""Bad input raises an error naming the table and the value; nothing crashes."""

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite._loader import ops

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")


@pytest.fixture
def tables():
    return [
        sok.Variable(np.zeros([17, 3]), dtype=tf.float32, name="users"),
        sok.Variable(np.zeros([7, 5]), dtype=tf.float32, name="items"),
    ]


def ids(rows, dtype=tf.int64):
    return tf.ragged.constant(rows, dtype=dtype, ragged_rank=1)


@pytest.mark.parametrize("use_function", [False, True])
@pytest.mark.parametrize(
    "bad_id,dtype", [(17, tf.int64), (-1, tf.int64), (99, tf.int32), (-5, tf.int32)]
)
def test_out_of_range_id(tables, bad_id, dtype, use_function):
    def call():
        return sok.lookup_sparse(tables, [ids([[1], [2]], dtype), ids([[1], [3, bad_id]], dtype)])

    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"table 1 \('items'\): id {bad_id} "):
        tf.function(call)() if use_function else call()


def test_row_longer_than_hotness(tables):
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"table 0 .*sample 1 has 4 ids, more than hotness 3"
    ):
        sok.lookup_sparse(tables, [ids([[1], [1, 2, 3, 4]]), ids([[1], [2]])], hotness=[3, 3])


def test_hotness_is_a_limit_not_a_shape(tables):
    out = sok.lookup_sparse(tables, [ids([[1], [1, 2]]), ids([[1], []])], hotness=[2, 1])
    assert out[0].shape == (2, 3)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"combiners": ["sum"]}, "combiners has 1 entries for 2 tables"),
        ({"combiners": ["sum", "max"]}, r"table 1 \('items'\): unknown combiner 'max'"),
        ({"hotness": [1, 2, 3]}, "hotness has 3 entries for 2 tables"),
        ({"hotness": [1, -1]}, "table 1 .*hotness must be >= 0"),
        ({"sp_weights": [None]}, "sp_weights has 1 entries for 2 tables"),
    ],
)
def test_list_mismatch_and_unknown_combiner(tables, kwargs, match):
    with pytest.raises(ValueError, match=match):
        sok.lookup_sparse(tables, [ids([[1]]), ids([[1]])], **kwargs)


def test_params_and_ids_count_mismatch(tables):
    with pytest.raises(ValueError, match="one entry per table"):
        sok.lookup_sparse(tables, [ids([[1]])])


def test_float_ids(tables):
    with pytest.raises(
        ValueError, match=r"table 0 \('users'\): ids must be int32 or int64, got float32"
    ):
        sok.lookup_sparse(tables, [ids([[1.0]], tf.float32), ids([[1]])])


def test_weights_count_mismatch(tables):
    w = tf.ragged.constant([[1.0, 2.0]])
    with pytest.raises(ValueError, match=r"table 0 \('users'\): 2 weights for 1 ids"):
        sok.lookup_sparse(tables, [ids([[1]]), ids([[1]])], [w, None])


def test_not_a_variable():
    with pytest.raises(ValueError, match="table 0: params must be sok_lite.Variable"):
        sok.lookup_sparse([tf.zeros([3, 2])], [ids([[1]])])


def test_unordered_sparse_ids(tables):
    sp = tf.SparseTensor(
        indices=[[1, 0], [0, 0]], values=tf.constant([1, 2], tf.int64), dense_shape=[2, 1]
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"table 0 \('users'\): .*row-major"):
        sok.lookup_sparse(tables, [sp, ids([[1], [1]])])


def test_sparse_row_id_beyond_dense_shape(tables):
    sp = tf.SparseTensor(
        indices=[[0, 0], [5, 0]], values=tf.constant([1, 2], tf.int64), dense_shape=[2, 1]
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"row id 5 .* out of range \[0, 2\)"):
        sok.lookup_sparse(tables, [sp, ids([[1], [1]])])


class TestRawOpsNeverReadOutOfBounds:
    """The ops are reachable without the Python checks; the kernels check again."""

    def test_gather_row_out_of_range(self, tables):
        with pytest.raises(
            tf.errors.InvalidArgumentError, match=r"row 17 is out of range \[0, 17\)"
        ):
            ops().sok_lite_gather_rows(
                handles=[tables[0].handle],
                indices=[tf.constant([17], tf.int64)],
                dtype=tf.float32,
                table_names=["users"],
            )

    def test_gather_dtype_mismatch(self, tables):
        with pytest.raises(tf.errors.InvalidArgumentError, match="dtype float does not match"):
            ops().sok_lite_gather_rows(
                handles=[tables[0].handle],
                indices=[tf.constant([1], tf.int64)],
                dtype=tf.float64,
                table_names=["users"],
            )

    def test_combine_inverse_out_of_range(self):
        with pytest.raises(tf.errors.InvalidArgumentError, match="inverse index 5"):
            ops().sok_lite_segment_combine(
                rows=[tf.zeros([2, 3])],
                inverse=[tf.constant([0, 5], tf.int32)],
                row_splits=[tf.constant([0, 2], tf.int64)],
                weights=[tf.zeros([0])],
                combiners=["sum"],
            )

    def test_combine_bad_row_splits(self):
        with pytest.raises(
            tf.errors.InvalidArgumentError, match="row_splits end at 3 but there are 2 ids"
        ):
            ops().sok_lite_segment_combine(
                rows=[tf.zeros([2, 3])],
                inverse=[tf.constant([0, 1], tf.int32)],
                row_splits=[tf.constant([0, 3], tf.int64)],
                weights=[tf.zeros([0])],
                combiners=["sum"],
            )

    def test_combine_grad_batch_mismatch(self):
        with pytest.raises(tf.errors.InvalidArgumentError):
            ops().sok_lite_segment_combine_grad(
                grads=[tf.zeros([3, 2])],
                inverse=[tf.constant([0], tf.int32)],
                row_splits=[tf.constant([0, 1], tf.int64)],
                weights=[tf.zeros([0])],
                num_unique=[tf.constant(1, tf.int64)],
                combiners=["sum"],
            )

    def test_unique_decreasing_row_splits(self):
        with pytest.raises(
            tf.errors.InvalidArgumentError, match=r"table 0 \('t'\): row_splits decrease"
        ):
            ops().sok_lite_unique_ids(
                ids=[tf.constant([1, 2], tf.int64)],
                row_splits=[tf.constant([0, 2, 1, 2], tf.int64)],
                num_rows=[5],
                hotness=[0],
                table_names=["table 0 ('t')"],
            )
