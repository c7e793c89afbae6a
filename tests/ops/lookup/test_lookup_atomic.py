"""A lookup_sparse call that fails changes nothing, and its error names the bad table by its
position in the caller's list and its name.

Hash tables store the keys they see: if they stored them before another table's ids were
found wrong, a failed call would leave rows behind (and count them for admission/eviction).
"""

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from tests.common import ragged

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")

EAGER_AND_GRAPH = pytest.mark.parametrize("graph", [False, True], ids=["eager", "tf.function"])


def call(fn, graph):
    return tf.function(fn)() if graph else fn()


@EAGER_AND_GRAPH
def test_out_of_range_static_id_stores_no_key_and_names_second_table(graph):
    hashed = sok.DynamicVariable(4, name="hashed")
    static = sok.Variable(np.ones([5, 4]), dtype=tf.float32, name="static")

    def lookup():
        return sok.lookup_sparse([hashed, static], [ragged([[7, 8], [9]]), ragged([[1], [5]])])

    with pytest.raises(tf.errors.InvalidArgumentError, match=r"table 1 \('static'\): .*5"):
        call(lookup, graph)
    assert int(hashed.size()) == 0
    keys, _ = hashed.export()
    assert keys.numpy().size == 0


@EAGER_AND_GRAPH
def test_static_table_before_hash_table_is_named_by_its_position(graph):
    static = sok.Variable(np.ones([5, 4]), dtype=tf.float32, name="first")
    hashed = sok.DynamicVariable(4, name="second")

    def lookup():
        return sok.lookup_sparse([static, hashed], [ragged([[-1]]), ragged([[3]])])

    with pytest.raises(tf.errors.InvalidArgumentError, match=r"table 0 \('first'\)"):
        call(lookup, graph)
    assert int(hashed.size()) == 0


@EAGER_AND_GRAPH
def test_second_hash_table_over_its_hotness_stores_nothing_in_the_first(graph):
    first = sok.DynamicVariable(4, name="first")
    second = sok.DynamicVariable(4, name="second")

    def lookup():
        ids = [ragged([[1, 2]]), ragged([[3, 4, 5]])]
        return sok.lookup_sparse([first, second], ids, hotness=[2, 2])

    # Inside a tf.function TF's assertion message escapes the quotes.
    label = r"table 1 \(\\?'second\\?'\)"
    with pytest.raises(tf.errors.InvalidArgumentError, match=label + ".*hotness"):
        call(lookup, graph)
    assert int(first.size()) == 0
    assert int(second.size()) == 0


def test_valid_mixed_call_still_stores_the_keys_and_matches_the_rows():
    hashed = sok.DynamicVariable(3, initializer="ones", name="hashed")
    static = sok.Variable(np.arange(15).reshape(5, 3), dtype=tf.float32, name="static")
    out_hashed, out_static = sok.lookup_sparse(
        [hashed, static], [ragged([[10, 11], [10]]), ragged([[1], [2, 4]])], hotness=[2, 2]
    )
    assert int(hashed.size()) == 2
    np.testing.assert_array_equal(out_hashed.numpy(), [[2, 2, 2], [1, 1, 1]])
    np.testing.assert_array_equal(out_static.numpy(), [[3, 4, 5], [18, 20, 22]])
