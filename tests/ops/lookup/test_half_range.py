"""A float16 table holds magnitudes up to 65,504: initial and assigned values beyond it are
refused (they would be stored as inf), naming the table and the value."""

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")

BEYOND = r"table 'wide': (initial|assigned) value 1000000.0 is beyond float16's range"


@pytest.mark.parametrize("value", [1e6, np.float32(1e6), -1e6])
def test_a_float16_table_refuses_an_initial_value_beyond_its_range(value):
    rows = np.ones([4, 3])
    rows[2, 1] = value
    with pytest.raises(ValueError, match=f"'wide': initial value {float(value)!r}"):
        sok.Variable(rows, dtype=tf.float16, name="wide")
    with pytest.raises(ValueError, match="beyond float16's range"):
        sok.Variable(tf.constant(rows, tf.float32), dtype=tf.float16, name="wide")
    with pytest.raises(ValueError, match="'wide': initial value 1e\\+300"):
        sok.Variable(np.full([2, 2], 1e300), dtype=tf.float16, name="wide")
    # An initializer's values are initial values too.
    with pytest.raises(ValueError, match=BEYOND):
        sok.Variable(shape=[4, 3], initializer=1e6, dtype=tf.float16, name="wide")


def test_values_within_range_and_other_dtypes_are_kept():
    edge = np.array([[65504.0, -65504.0], [np.inf, np.nan]])
    table = sok.Variable(edge, dtype=tf.float16, name="edge")
    np.testing.assert_array_equal(table.numpy(), edge.astype(np.float16))
    for dtype in (tf.bfloat16, tf.float32):  # bfloat16 has float32's range
        wide = sok.Variable(np.full([2, 2], 1e6), dtype=dtype, name="wide")
        assert float(wide.numpy()[0, 0]) == pytest.approx(1e6, rel=1e-2)


def test_assigning_a_value_beyond_the_range_is_refused_and_changes_nothing():
    table = sok.Variable(np.ones([4, 3]), dtype=tf.float16, name="wide")
    with pytest.raises(ValueError, match=BEYOND):
        table.assign(np.full([4, 3], 1e6))
    with pytest.raises(ValueError, match=BEYOND):
        table.assign_rows([1], np.full([1, 3], 1e6, np.float32))
    np.testing.assert_array_equal(table.numpy(), np.ones([4, 3]))
    table.assign(np.full([4, 3], 2.0))
    assert table.numpy().tolist() == [[2.0] * 3] * 4

    hashed = sok.DynamicVariable(3, initializer=0.0, dtype=tf.float16, name="wide")
    with pytest.raises(ValueError, match=BEYOND):
        hashed.assign([5], np.full([1, 3], 1e6, np.float32))
    assert int(hashed.size()) == 0
    # Optimizer slots may hold more than float16's range: only the value columns are checked.
    rows = np.concatenate([np.ones([1, 3]), np.full([1, 3], 1e6)], axis=1).astype(np.float32)
    hashed.assign([5], rows, with_slots=True)
    assert hashed.export()[1].numpy().tolist() == [[1.0] * 3]


def test_assign_in_a_graph_checks_when_it_runs():
    table = sok.DynamicVariable(3, initializer=0.0, dtype=tf.float16, name="wide")

    @tf.function
    def assign(values):
        table.assign(tf.constant([5], tf.int64), values)

    assign(tf.ones([1, 3]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="assigned value beyond float16"):
        assign(tf.fill([1, 3], 1e6))
