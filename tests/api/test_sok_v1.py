"""SOK first-API compatibility: sok.Init, sok.All2AllDenseEmbedding, sok.DistributedEmbedding."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.compat.sok_v1 import global_batch_size

VOCAB, DIM, SLOTS = 40, 3, 4


def test_init_records_the_global_batch_and_returns_ok():
    assert sok.Init(global_batch_size=96) == "OK"
    assert global_batch_size() == 96 and sok.num_ranks() == 1


@pytest.mark.parametrize(
    "kwargs, error",
    [({}, TypeError), ({"global_batch_size": 8, "seed": 1}, TypeError)]
    + [({"global_batch_size": b}, ValueError) for b in (0, -4, 8.0)],
)
def test_init_rejects_bad_arguments(kwargs, error):
    with pytest.raises(error):
        sok.Init(**kwargs)


def test_all2all_dense_embedding_looks_up_every_id():
    layer = sok.All2AllDenseEmbedding(VOCAB, DIM, slot_num=SLOTS, nnz_per_slot=2)
    ids = np.random.default_rng(0).integers(0, VOCAB, [5, SLOTS, 2])
    out = layer(tf.constant(ids, tf.int32))
    assert out.shape == (5, SLOTS, 2, DIM)
    table = layer.embedding_variable.numpy()
    assert table.shape == (VOCAB, DIM) and np.abs(table).max() <= 0.05  # SOK's uniform init
    np.testing.assert_array_equal(out.numpy(), table[ids])


def test_all2all_dense_embedding_with_dynamic_input_keeps_the_input_shape():
    layer = sok.All2AllDenseEmbedding(VOCAB, DIM, slot_num=1, nnz_per_slot=1, dynamic_input=True)
    ids, _ = tf.unique(tf.constant([3, 7, 3, 9], tf.int64))
    out = layer(ids)
    assert out.shape == (3, DIM)
    np.testing.assert_array_equal(out.numpy(), layer.embedding_variable.numpy()[[3, 7, 9]])


def test_all2all_gradient_trains_under_optimizer_scope():
    layer = sok.All2AllDenseEmbedding(VOCAB, DIM, slot_num=2, nnz_per_slot=2)
    ids = tf.constant([[[1, 1], [2, 5]]], tf.int64)  # id 1 twice: its gradient rows add up
    layer(ids)
    before = layer.embedding_variable.numpy()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(ids))
    emb_vars, others = sok.split_embedding_variable_from_others(layer.trainable_variables)
    assert emb_vars == [layer.embedding_variable] and others == []
    grads = tape.gradient(loss, emb_vars)
    assert isinstance(grads[0], tf.IndexedSlices)
    with sok.OptimizerScope(emb_vars):
        keras.optimizers.SGD(0.5).apply_gradients(zip(grads, emb_vars))
    expected = before.copy()
    expected[1] -= 0.5 * 2
    expected[[2, 5]] -= 0.5
    np.testing.assert_allclose(layer.embedding_variable.numpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("combiner", ["Sum", "mean"])
@pytest.mark.parametrize("as_ragged", [False, True])
def test_distributed_embedding_combines_each_slot(combiner, as_ragged):
    layer = sok.DistributedEmbedding(combiner, VOCAB, DIM, slot_num=2, max_nnz=3)
    rows = [[1, 2], [3], [4, 5, 6], []]  # 2 samples x 2 slots, sample-major
    ids = tf.ragged.constant(rows, dtype=tf.int64)
    out = layer(ids if as_ragged else ids.to_sparse())
    assert out.shape == (2, 2, DIM)
    table = layer.embedding_variable.numpy()
    reduce = np.sum if combiner.lower() == "sum" else np.mean
    expected = [reduce(table[r], axis=0) if r else np.zeros(DIM) for r in rows]
    np.testing.assert_allclose(out.numpy().reshape(4, DIM), expected, rtol=1e-6, atol=1e-7)


def test_distributed_embedding_rejects_bad_input():
    with pytest.raises(ValueError, match="combiner"):
        sok.DistributedEmbedding("max", VOCAB, DIM, slot_num=2, max_nnz=3)
    layer = sok.DistributedEmbedding("sum", VOCAB, DIM, slot_num=2, max_nnz=2)
    with pytest.raises(ValueError, match="SparseTensor"):
        layer(tf.zeros([4, 2], tf.int64))
    with pytest.raises(tf.errors.InvalidArgumentError, match="slot_num"):
        layer(tf.ragged.constant([[1], [2], [3]], dtype=tf.int64))  # 3 rows, 2 slots
    with pytest.raises(tf.errors.InvalidArgumentError):
        layer(tf.ragged.constant([[1, 2, 3], [4]], dtype=tf.int64))  # longer than max_nnz
    with pytest.raises(tf.errors.InvalidArgumentError, match="out of range"):
        layer(tf.ragged.constant([[VOCAB], [0]], dtype=tf.int64))


def test_layers_round_trip_their_config_and_work_in_functional_models():
    dense = sok.All2AllDenseEmbedding(VOCAB, DIM, 3, 2, embedding_initializer="zeros")
    clone = sok.All2AllDenseEmbedding.from_config(dense.get_config())
    assert clone.get_config() == dense.get_config()
    sparse = sok.DistributedEmbedding("mean", VOCAB, DIM, slot_num=3, max_nnz=4)
    assert sok.DistributedEmbedding.from_config(sparse.get_config()).combiner == "mean"

    ids = keras.Input(shape=(3, 2), dtype="int64")
    vectors = dense(ids)
    assert tuple(vectors.shape) == (None, 3, 2, DIM)
    model = keras.Model(ids, keras.layers.Dense(1)(keras.layers.Flatten()(vectors)))
    assert model(np.zeros([4, 3, 2], np.int64)).shape == (4, 1)
    assert dense.embedding_variable in sok.filter_variables(model.trainable_variables)[0]


def test_sok2_style_init_and_apply_arguments_are_accepted():
    assert sok.init(comm_tool="local", use_legacy_optimizer=False).num_ranks == 1
    table = sok.Variable(np.ones([3, 2]), dtype=tf.float32)
    grad = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([1], tf.int64))
    opt = sok.optimizers.SGD(1.0)
    opt.apply_gradients([(grad, table)], experimental_aggregate_gradients=False)
    np.testing.assert_array_equal(table.numpy()[1], [0.0, 0.0])
    wrapper = sok.OptimizerWrapper(keras.optimizers.SGD(1.0))
    wrapper.apply_gradients([(grad, table)], experimental_aggregate_gradients=False)
    np.testing.assert_array_equal(table.numpy()[1], [-1.0, -1.0])
