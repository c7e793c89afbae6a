"""SOK 2.x calls that sok_lite takes unchanged: argument order and keywords
(docs/migration_from_sok.md)."""

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok


def test_lookup_sparse_takes_combiners_fourth_as_sok_does():
    table = sok.Variable(np.arange(12).reshape(4, 3), dtype=tf.float32)
    ids = tf.ragged.constant([[1, 3], [2]], dtype=tf.int64)
    weights = tf.ragged.constant([[1.0, 3.0], [2.0]])
    (mean,) = sok.lookup_sparse([table], [ids], None, ["mean"])
    np.testing.assert_allclose(mean.numpy(), [[6, 7, 8], [6, 7, 8]])
    (weighted,) = sok.lookup_sparse([table], [ids], [weights], ["sum"])
    np.testing.assert_allclose(weighted.numpy(), [[30, 34, 38], [12, 14, 16]])


def test_hotness_is_a_keyword():
    table = sok.Variable(np.zeros([4, 3]), dtype=tf.float32)
    ids = tf.ragged.constant([[1, 3, 2]], dtype=tf.int64)
    with pytest.raises(TypeError):
        sok.lookup_sparse([table], [ids], None, ["sum"], [2])
    with pytest.raises(tf.errors.InvalidArgumentError, match="hotness"):
        sok.lookup_sparse([table], [ids], None, ["sum"], hotness=[2])


def test_low_frequency_filter_is_refused_with_the_sok_lite_way():
    table = sok.DynamicVariable(3)
    ids = tf.ragged.constant([[1]], dtype=tf.int64)
    with pytest.raises(ValueError, match="min_count"):
        sok.lookup_sparse([table], [ids], use_low_frequency_filter=True)
    (out,) = sok.lookup_sparse([table], [ids], use_low_frequency_filter=False)
    assert out.shape == (1, 3)


@pytest.mark.parametrize("name", ["adam", {"class_name": "SGD", "config": {}}])
def test_optimizer_wrapper_refuses_an_optimizer_name_and_says_how_to_build_one(name):
    for wrapper in (sok.OptimizerWrapper, sok.keras.OptimizerWrapper):
        with pytest.raises(TypeError, match=r"keras\.optimizers\.get\("):
            wrapper(name)


def test_lookup_sparse_refuses_tables_fed_different_batch_sizes():
    # SOK's fused lookup takes one batch for every table of a call (its row-length buffer is
    # split evenly over the tables).
    users = sok.Variable(np.zeros([10, 3]), dtype=tf.float32, name="users")
    items = sok.DynamicVariable(3, name="items")
    two = tf.ragged.constant([[1], [2, 3]], dtype=tf.int64)
    three = tf.ragged.constant([[1], [2], [4]], dtype=tf.int64)
    match = r"users\D*2\b.*items\D*3\b"
    with pytest.raises(ValueError, match=match):
        sok.lookup_sparse([users, items], [two, three])
    assert int(items.size()) == 0  # nothing looked up

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int64, 1)] * 2)
    def lookup(a, b):
        return sok.lookup_sparse([users, items], [a, b])

    with pytest.raises(tf.errors.InvalidArgumentError, match=match):
        lookup(two, three)
    assert int(items.size()) == 0
    assert [o.shape for o in lookup(three, three)] == [(3, 3), (3, 3)]
