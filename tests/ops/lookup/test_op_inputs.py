"""Gradient functions read an op's inputs by name: list inputs split by the op's registration."""

import numpy as np
import pytest
import tensorflow as tf

from sok_lite.ops import lookup_ops
from sok_lite.ops.op_inputs import inputs_by_name

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")


def test_list_inputs_are_split_by_name():
    captured = {}

    @tf.function
    def combine():
        rows = [tf.ones([3, 2]), tf.ones([1, 4])]
        inverse = [tf.constant([0, 2, 1], tf.int32), tf.constant([0], tf.int32)]
        splits = [tf.constant([0, 1, 3], tf.int64), tf.constant([0, 1], tf.int64)]
        weights = [tf.zeros([0]), tf.zeros([0])]
        out = lookup_ops.segment_combine(rows, inverse, splits, weights, ["sum", "mean"])
        op = out[0].op
        named = inputs_by_name(op)
        captured["names"] = list(named)
        captured["sizes"] = {k: len(v) for k, v in named.items()}
        captured["same"] = [t is u for t, u in zip(named["inverse"], op.inputs[2:4])]
        return out

    first, second = combine()
    assert captured["names"] == ["rows", "inverse", "row_splits", "weights"]
    assert captured["sizes"] == {"rows": 2, "inverse": 2, "row_splits": 2, "weights": 2}
    assert captured["same"] == [True, True]
    np.testing.assert_array_equal(first.numpy(), [[1, 1], [2, 2]])
    np.testing.assert_array_equal(second.numpy(), [[1, 1, 1, 1]])
