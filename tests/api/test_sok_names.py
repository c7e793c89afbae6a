"""SOK 2.x's remaining top-level names behave as SOK code expects (docs/migration_from_sok.md):
tf_version, raw_ops, communication, set_comm_tool, init's SOK forms, DistributedVariable,
LocalizedVariable, assign, export, incremental_model_dump, sparse_read_and_evict,
all2all_dense_embedding and SGD."""

import datetime
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite import comm
from sok_lite.comm.local import LocalCommunicator


@pytest.fixture(autouse=True)
def one_process():
    comm.init("local")
    yield
    comm.init("local")


class FakeHorovod(LocalCommunicator):
    """Stands for the Horovod communicator: the tests check which backend init chose."""


@pytest.fixture
def fake_horovod(monkeypatch):
    monkeypatch.setattr("sok_lite.comm.horovod.HorovodCommunicator", FakeHorovod)


# --- tf_version, raw_ops ----------------------------------------------------------------------


def test_tf_version_is_the_list_of_version_numbers():
    assert isinstance(sok.tf_version, list)
    assert all(isinstance(x, int) for x in sok.tf_version)
    major, minor = (int(x) for x in tf.__version__.split(".")[:2])
    assert sok.tf_version[:2] == [major, minor]
    # SOK code compares it this way.
    assert sok.tf_version[0] == 2 and sok.tf_version[1] >= 17


def test_raw_ops_loads_the_op_library_on_first_use_only():
    code = (
        "import sys, tensorflow; sys.stdout.flush(); sys.stderr.flush(); "
        "print('--mark--', flush=True); print('--mark--', file=sys.stderr, flush=True); "
        "import sok_lite as sok; from sok_lite import _loader; "
        "assert _loader.ops.cache_info().currsize == 0, 'loaded at import'; "
        "r = sok.raw_ops; repr(r); "
        "assert _loader.ops.cache_info().currsize == 0, 'loaded by access'; "
        "assert callable(r.sok_lite_dynamic_export); "
        "assert _loader.ops.cache_info().currsize == 1"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("--mark--")[-1].strip() == ""
    assert proc.stderr.split("--mark--")[-1].strip() == ""
    assert "sok_lite_dynamic_export" in dir(sok.raw_ops)
    with pytest.raises(AttributeError):
        sok.raw_ops.no_such_op  # noqa: B018


# --- communication, set_comm_tool, init -------------------------------------------------------


def test_communication_reports_one_device_per_rank():
    c = sok.communication
    assert (c.rank(), c.num_ranks(), c.local_rank()) == (0, 1, 0)
    assert (c.id_in_rank(), c.num_gpu_per_rank()) == (0, 1)
    assert (c.global_gpu_id(), c.num_gpus()) == (c.rank(), c.num_ranks())


def test_communication_collectives():
    c = sok.communication
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    out, received = c.alltoall(x, tf.constant([2], tf.int64))
    np.testing.assert_array_equal(out.numpy(), x.numpy())
    assert received.numpy().tolist() == [2]
    for op in ("sum", "average", "max", "min"):
        np.testing.assert_array_equal(c.allreduce(x, op).numpy(), x.numpy())
    assert c.allreduce(tf.constant([7]), "average").numpy().tolist() == [7]
    np.testing.assert_array_equal(c.allgather(x).numpy(), x.numpy())
    np.testing.assert_array_equal(c.broadcast(x, 0).numpy(), x.numpy())
    with pytest.raises(ValueError, match="allreduce op"):
        c.allreduce(x, "prod")


def test_set_comm_tool_maps_to_init(fake_horovod):
    assert sok.set_comm_tool("horovod") is None
    assert isinstance(comm.current(), FakeHorovod)
    sok.set_comm_tool("local")
    assert type(comm.current()) is LocalCommunicator
    sok.set_comm_tool("hvd")
    assert isinstance(comm.current(), FakeHorovod)
    with pytest.raises(ValueError, match="unknown communicator 'nccl'"):
        sok.set_comm_tool("nccl")


def test_init_takes_every_sok_form(fake_horovod):
    assert type(sok.init("single")) is LocalCommunicator
    assert isinstance(sok.init(comm_tool="horovod"), FakeHorovod)
    assert type(sok.init(comm_tool="single")) is LocalCommunicator
    assert isinstance(sok.init("horovod", False), FakeHorovod)
    assert isinstance(sok.init(comm_tool="hvd", use_legacy_optimizer=True), FakeHorovod)
    assert isinstance(sok.init(comm_tool="horovod", use_legacy_optimizer=False), FakeHorovod)
    assert type(sok.init()) is LocalCommunicator  # auto: hvd.init() has not run here
    with pytest.raises(ValueError, match="pass one"):
        sok.init("local", comm_tool="horovod")
    with pytest.raises(TypeError):
        sok.init(comm_tool="horovod", global_batch_size=8)


# --- DistributedVariable, LocalizedVariable ---------------------------------------------------


def test_distributed_variable_is_a_distributed_sok_variable():
    value = np.arange(12, dtype=np.float32).reshape(4, 3)
    v = sok.DistributedVariable(value, name="table")
    assert isinstance(v, sok.Variable) and v.mode == "distributed"
    assert v.dtype == tf.float32 and v.name.startswith("table")
    np.testing.assert_array_equal(v.numpy(), value)
    assert isinstance(v, sok.DistributedVariable)
    assert isinstance(sok.Variable(value), sok.DistributedVariable)
    assert not isinstance(v, sok.LocalizedVariable)
    assert not isinstance(tf.Variable(value), sok.DistributedVariable)
    assert not isinstance(sok.DynamicVariable(3), sok.DistributedVariable)
    # SOK passes its rank and size; with one rank they are 0 and 1.
    same = sok.DistributedVariable(value, global_gpu_id=0, num_gpus=1)
    np.testing.assert_array_equal(same.numpy(), value)
    assert sok.filter_variables([v, tf.Variable(1.0)])[0] == [v]


def test_distributed_variable_takes_soks_other_forms():
    assert sok.DistributedVariable(np.ones([5])).global_shape.as_list() == [1, 5]
    assert sok.DistributedVariable(np.ones([2, 2])).dtype == tf.float64
    assert sok.DistributedVariable([[1, 2]]).dtype == tf.float32
    zeros = sok.DistributedVariable(shape=[6, 2], initializer="zeros", dtype=tf.float32)
    np.testing.assert_array_equal(zeros.numpy(), np.zeros([6, 2]))
    frozen = sok.DistributedVariable(np.ones([2, 2]), trainable=False)
    assert not frozen.trainable


def test_distributed_variable_refuses_what_it_cannot_honour():
    with pytest.raises(ValueError, match="num_gpus=2"):
        sok.DistributedVariable(np.ones([2, 2]), num_gpus=2)
    with pytest.raises(ValueError, match="global_gpu_id=1"):
        sok.DistributedVariable(np.ones([2, 2]), global_gpu_id=1)
    with pytest.raises(ValueError, match="constraint"):
        sok.DistributedVariable(np.ones([2, 2]), constraint=lambda x: x)
    with pytest.raises(TypeError):
        sok.DistributedVariable(np.ones([2, 2]), target_gpu=0)


def test_localized_variable_puts_the_table_on_target_gpu():
    value = np.arange(6, dtype=np.float32).reshape(3, 2)
    v = sok.LocalizedVariable(value, target_gpu=0)
    assert isinstance(v, sok.Variable) and v.mode == "localized:0"
    np.testing.assert_array_equal(v.numpy(), value)
    assert isinstance(v, sok.LocalizedVariable)
    assert isinstance(sok.Variable(value, mode="localized:0"), sok.LocalizedVariable)
    assert not isinstance(v, sok.DistributedVariable)
    assert sok.filter_variables([v])[0] == [v]
    with pytest.raises(ValueError, match="names rank 1 of 1"):
        sok.LocalizedVariable(value, target_gpu=1)
    with pytest.raises(TypeError, match="target_gpu"):
        sok.LocalizedVariable(value)


# --- assign, export, incremental_model_dump ---------------------------------------------------


def test_assign_then_export_a_dynamic_variable():
    keys = tf.constant([3, 2**40, -5], tf.int64)
    values = tf.constant(np.random.default_rng(0).random([3, 4]), tf.float32)
    table = sok.DynamicVariable(dimension=4)
    assert sok.assign(table, keys, values) is table
    assert int(table.size()) == 3
    out_keys, out_values = sok.export(table)
    order = np.argsort(out_keys.numpy())
    np.testing.assert_array_equal(out_keys.numpy()[order], np.sort(keys.numpy()))
    expected = dict(zip(keys.numpy().tolist(), values.numpy()))
    for k, row in zip(out_keys.numpy(), out_values.numpy()):
        np.testing.assert_allclose(row, expected[k])


def test_assign_and_export_take_lists():
    a, b = sok.DynamicVariable(2), sok.DynamicVariable(3)
    sok.assign([a, b], [[1], [2, 3]], [np.ones([1, 2]), np.zeros([2, 3])])
    (ka, va), (kb, vb) = sok.export([a, b])
    assert ka.numpy().tolist() == [1] and sorted(kb.numpy().tolist()) == [2, 3]
    assert va.shape == (1, 2) and vb.shape == (2, 3)
    with pytest.raises(ValueError, match="2 tables, 1 key lists"):
        sok.assign([a, b], [[1]], [np.ones([1, 2])])
    with pytest.raises(TypeError, match="export takes"):
        sok.export(tf.Variable([[1.0]]))


def test_assign_and_export_a_static_variable():
    value = np.arange(10, dtype=np.float32).reshape(5, 2)
    table = sok.Variable(value)
    ids, rows = sok.export(table)
    assert ids.dtype == tf.int64 and ids.numpy().tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(rows.numpy(), value)
    sok.assign(table, [4, 1], [[-1.0, -1.0], [-2.0, -2.0]])
    value[4], value[1] = -1.0, -2.0
    np.testing.assert_array_equal(table.numpy(), value)
    with pytest.raises(tf.errors.InvalidArgumentError, match="past the table"):
        sok.assign(table, [5], [[0.0, 0.0]])
    local = sok.Variable(value, mode="localized:0")
    sok.assign(local, [0], [[9.0, 9.0]])
    assert local.numpy()[0].tolist() == [9.0, 9.0]


def _train_rows(table, optimizer, keys):
    ids = tf.ragged.constant([keys], dtype=tf.int64)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(sok.lookup_sparse(table, ids))
    optimizer.apply_gradients(zip(tape.gradient(loss, [table]), [table]))


def test_incremental_model_dump_returns_rows_changed_after_a_step():
    table = sok.DynamicVariable(2, initializer="zeros")
    other = sok.DynamicVariable(2, initializer="zeros")
    optimizer = sok.OptimizerWrapper(keras.optimizers.SGD(1.0))
    _train_rows(table, optimizer, [1, 2])
    _train_rows(other, optimizer, [10])
    since = int(optimizer.iterations)
    _train_rows(table, optimizer, [2, 3])
    keys, values = sok.incremental_model_dump(table, since)
    assert len(keys) == len(values) == 1
    order = np.argsort(keys[0])
    assert keys[0][order].tolist() == [2, 3]
    np.testing.assert_array_equal(values[0][order], [[-2.0, -2.0], [-1.0, -1.0]])
    keys, _ = sok.incremental_model_dump([table, other], [0])
    assert sorted(keys[0].tolist()) == [1, 2, 3] and keys[1].tolist() == [10]
    keys, _ = sok.incremental_model_dump([table, other], [since, 0])
    assert sorted(keys[0].tolist()) == [2, 3] and keys[1].tolist() == [10]


def test_incremental_model_dump_refuses_times_and_static_tables():
    table = sok.DynamicVariable(2)
    with pytest.raises(TypeError, match="optimizer's iterations"):
        sok.incremental_model_dump(table, datetime.datetime.now(datetime.UTC))
    with pytest.raises(TypeError, match="since_step"):
        sok.incremental_model_dump(sok.Variable(np.ones([2, 2])), 0)
    with pytest.raises(ValueError, match="session"):
        sok.incremental_model_dump(table, 0, sess=object())
    with pytest.raises(ValueError, match="3 entries for 2 tables"):
        sok.incremental_model_dump([table, table], [0, 0, 0])


def test_sparse_read_and_evict_names_the_alternatives():
    with pytest.raises(NotImplementedError, match="lookup_sparse.*capacity"):
        sok.sparse_read_and_evict(sok.DynamicVariable(2), tf.constant([1], tf.int64))


# --- all2all_dense_embedding ------------------------------------------------------------------


def test_all2all_dense_embedding_gathers_rows_in_the_ids_shape():
    value = np.random.default_rng(1).random([9, 4]).astype(np.float32)
    table = sok.Variable(value)
    ids = tf.constant([[8, 0, 3], [3, 3, 1]], tf.int64)
    out = sok.all2all_dense_embedding(table, ids)
    assert out.shape == (2, 3, 4)
    np.testing.assert_allclose(out.numpy(), value[ids.numpy()])
    flat = sok.all2all_dense_embedding(table, tf.constant([2, 5], tf.int32))
    np.testing.assert_allclose(flat.numpy(), value[[2, 5]])
    with pytest.raises(tf.errors.InvalidArgumentError):
        sok.all2all_dense_embedding(table, tf.constant([9], tf.int64))


def test_all2all_dense_embedding_trains_like_embedding_lookup():
    value = np.random.default_rng(2).random([20, 3]).astype(np.float32)
    table, reference = sok.Variable(value), tf.Variable(value)
    rng = np.random.default_rng(3)
    sok_opt, tf_opt = keras.optimizers.SGD(0.1), keras.optimizers.SGD(0.1)
    for _ in range(3):
        ids = tf.constant(rng.integers(0, 20, [16]), tf.int64)
        weight = tf.constant(rng.random([16, 3]), tf.float32)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(sok.all2all_dense_embedding(table, ids) * weight)
        grads = tape.gradient(loss, [table])
        assert isinstance(grads[0], tf.IndexedSlices)
        with sok.OptimizerScope([table]):
            sok_opt.apply_gradients(zip(grads, [table]))
        with tf.GradientTape() as tape:
            ref_loss = tf.reduce_sum(tf.nn.embedding_lookup(reference, ids) * weight)
        tf_opt.apply_gradients(zip(tape.gradient(ref_loss, [reference]), [reference]))
        np.testing.assert_allclose(loss.numpy(), ref_loss.numpy(), rtol=1e-5)
    np.testing.assert_allclose(table.numpy(), reference.numpy(), rtol=1e-5)


def test_all2all_dense_embedding_reads_a_dynamic_variable():
    table = sok.DynamicVariable(2, initializer="ones")
    out = sok.all2all_dense_embedding(table, tf.constant([[2**40], [-3]], tf.int64))
    np.testing.assert_array_equal(out.numpy(), np.ones([2, 1, 2]))
    assert int(table.size()) == 2


# --- SGD ------------------------------------------------------------------------------------


def test_sgd_matches_keras_sgd_on_tables_and_dense_variables():
    rng = np.random.default_rng(4)
    value = rng.random([10, 3]).astype(np.float32)
    table, dense, reference = sok.Variable(value), tf.Variable(value), tf.Variable(value)
    sok_opt, tf_opt = sok.SGD(lr=0.5), keras.optimizers.SGD(learning_rate=0.5)
    assert isinstance(sok_opt.lr, tf.Variable) and float(sok_opt.lr) == 0.5
    for _ in range(3):
        ids = tf.constant(rng.integers(0, 10, [8]), tf.int64)  # duplicates add up
        weight = tf.constant(rng.random([8, 3]), tf.float32)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(sok.all2all_dense_embedding(table, ids) * weight)
            loss += tf.reduce_sum(tf.nn.embedding_lookup(dense, ids) * weight)
        grads = tape.gradient(loss, [table, dense])
        sok_opt.apply_gradients(zip(grads, [table, dense]), global_step=None)
        with tf.GradientTape() as tape:
            ref_loss = tf.reduce_sum(tf.nn.embedding_lookup(reference, ids) * weight)
        tf_opt.apply_gradients(zip(tape.gradient(ref_loss, [reference]), [reference]))
    np.testing.assert_allclose(table.numpy(), reference.numpy(), rtol=1e-5)
    np.testing.assert_allclose(dense.numpy(), reference.numpy(), rtol=1e-5)
    assert int(sok_opt.iterations) == 3


def test_sgd_learning_rate_variable_drives_the_step():
    table = sok.DynamicVariable(2, initializer="zeros")
    opt = sok.SGD(1.0)
    _train_rows(table, opt, [5])
    opt.lr.assign(0.25)
    _train_rows(table, opt, [5])
    _, values = sok.export(table)
    np.testing.assert_allclose(values.numpy(), [[-1.25, -1.25]])
    assert opt.apply_gradients([(None, table)]) is None


def test_variable_has_sok_placement_attributes():
    distributed = sok.Variable(np.zeros([6, 2]), dtype=tf.float32)
    localized = sok.Variable(np.zeros([6, 2]), dtype=tf.float32, mode="localized:0")
    assert (distributed.target_gpu, localized.target_gpu) == (-1, 0)
    assert distributed.num_gpus == localized.num_gpus == sok.num_ranks() == 1
    ids = tf.constant([0, 5, 3], tf.int64)
    np.testing.assert_array_equal(distributed.key_map(ids).numpy(), [0, 5, 3])
    np.testing.assert_array_equal(localized.key_map(ids).numpy(), [0, 5, 3])
