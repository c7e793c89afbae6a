"""sok_lite.Variable with one rank: construction, placement parsing, errors."""

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.tables.placement import Placement


def test_from_initial_value():
    v = sok.Variable(np.arange(6).reshape(3, 2), dtype=tf.float32, name="emb")
    assert isinstance(v, tf.Variable)
    assert v.dtype == tf.float32 and v.global_shape == (3, 2) and v.mode == "distributed"
    np.testing.assert_array_equal(v.numpy(), np.arange(6).reshape(3, 2))
    assert v.name.startswith("emb")


def test_from_shape_and_initializer():
    v = sok.Variable(shape=[5, 4], initializer="ones")
    np.testing.assert_array_equal(v.numpy(), np.ones([5, 4]))
    w = sok.Variable(shape=[5, 4], initializer=lambda shape, dtype: tf.fill(shape, 2.0))
    np.testing.assert_array_equal(w.numpy(), np.full([5, 4], 2.0))


def test_localized_on_rank_zero_holds_the_table():
    v = sok.Variable(np.ones([4, 2]), mode="localized:0")
    assert v.mode == "localized:0" and v.shape == (4, 2)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"initial_value": np.ones([3])}, "must be 2-D"),
        ({"initial_value": np.ones([3, 2]), "mode": "sharded"}, "mode must be"),
        ({"initial_value": np.ones([3, 2]), "mode": "localized:1"}, "names rank 1 of 1"),
        ({"initial_value": np.ones([3, 2]), "dtype": tf.int32}, "dtype int32 is not supported"),
        ({"initial_value": np.ones([3, 2]), "shape": [3, 2]}, "not both"),
        ({}, "pass initial_value"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sok.Variable(**kwargs)


@pytest.mark.parametrize(
    "mode,rows,num_ranks,expected",
    [
        ("distributed", 17, 2, [9, 8]),
        ("distributed", 1, 2, [1, 0]),
        ("distributed", 6, 3, [2, 2, 2]),
        ("localized:1", 5, 2, [0, 5]),
    ],
)
def test_placement_local_rows(mode, rows, num_ranks, expected):
    p = Placement.parse(mode)
    assert [p.local_rows(rows, r, num_ranks) for r in range(num_ranks)] == expected


def test_checkpoint_round_trip(tmp_path):
    v = sok.Variable(np.arange(6.0).reshape(3, 2))
    path = tf.train.Checkpoint(v=v).save(str(tmp_path / "ckpt"))
    v.assign(tf.zeros([3, 2]))
    tf.train.Checkpoint(v=v).restore(path).assert_consumed()
    np.testing.assert_array_equal(v.numpy(), np.arange(6.0).reshape(3, 2))
