"""DynamicVariable as SOK 2.x code uses it: SOK's constructor keywords and attributes, its
initializer strings, `size` as a property, and tf.nn.embedding_lookup / tf.gather on the table
with gradients that the optimizer wrappers apply row by row."""

import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from tests.common import rows_by_key
from tests.distributed.launcher import REPO

# --- construction -----------------------------------------------------------------------


def test_sok_keywords_and_attributes():
    table = sok.DynamicVariable(
        dimension=3,
        initializer="13",
        var_type="hbm",
        key_type=tf.int64,
        dtype=tf.float32,
        mode="distributed",
        name="clicks",
    )
    assert table.dimension == 3 and table.shape.as_list() == [None, 3]
    assert table.key_type == table.key_dtype == tf.int64
    assert table.handle_dtype == tf.float32
    assert table.backend_type == "hbm"
    assert table.mode == "distributed" and table.target_gpu == -1
    assert table.num_gpus == 1
    assert table.config_dict == {}
    assert table.capacity is None
    out = tf.nn.embedding_lookup(table, [0, 2**40])
    np.testing.assert_array_equal(out.numpy(), np.full([2, 3], 13.0))


def test_defaults_match_sok_backend_names():
    table = sok.DynamicVariable(2)
    assert table.backend_type == "hbm" and table.mode == "distributed"
    assert table.key_type == tf.int64 and table.handle_dtype == tf.float32


def test_positional_arguments_follow_sok_order():
    # dimension, initializer, var_type, name, constraint, trainable, key_type, dtype, mode
    table = sok.DynamicVariable(2, "7", "hybrid", "pos", None, False, tf.int32, tf.float32, None)
    assert table.name.startswith("pos") and not table.trainable
    assert table.backend_type == "hybrid" and table.key_type == tf.int32
    np.testing.assert_array_equal(tf.gather(table, [5]).numpy(), [[7.0, 7.0]])


@pytest.mark.parametrize("key_type", [tf.int32, "int32", np.int32])
def test_key_type_spellings(key_type):
    table = sok.DynamicVariable(2, key_type=key_type, initializer="zeros")
    assert table.key_dtype == tf.int32
    tf.gather(table, tf.constant([-(2**31), 2**31 - 1], tf.int32))
    keys, _ = table.export()
    assert keys.dtype == tf.int32 and sorted(keys.numpy().tolist()) == [-(2**31), 2**31 - 1]


def test_hybrid_with_capacities_bounds_each_rank_and_evicts():
    table = sok.DynamicVariable(
        dimension=2,
        var_type="hybrid",
        initializer=str(11),
        init_capacity=2,
        max_capacity=2,
        max_load_factor=0.5,
        evict_strategy="kLru",
    )
    assert table.backend_type == "hybrid"
    assert table.capacity == 2  # max_capacity rows on each of the 1 rank
    assert table.config_dict == {"max_load_factor": 0.5, "evict_strategy": "kLru"} | {
        "init_capacity": 2,
        "max_capacity": 2,
    }
    for keys in ([1], [2], [3]):  # one key per step: the least recently used one goes
        tf.nn.embedding_lookup(table, keys)
    assert int(table.size()) == 2
    assert sorted(rows_by_key(table)) == [2, 3]


def test_init_capacity_alone_is_only_a_hint():
    table = sok.DynamicVariable(2, var_type="hybrid", init_capacity=1)
    tf.gather(table, [1, 2, 3, 4])
    assert int(table.size()) == 4 and table.capacity is None


def test_localized_mode_on_one_rank():
    table = sok.DynamicVariable(2, initializer="3", mode="localized:0")
    assert table.mode == "localized:0" and table.target_gpu == 0
    assert table.placement.kind == "localized" and table.placement.rank == 0
    out = sok.lookup_sparse(table, tf.ragged.constant([[1, 2]], dtype=tf.int64))
    np.testing.assert_array_equal(out.numpy(), [[6.0, 6.0]])
    np.testing.assert_array_equal(tf.gather(table, [9]).numpy(), [[3.0, 3.0]])


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"var_type": "ssd"}, ValueError, "var_type"),
        ({"constraint": lambda x: x}, ValueError, "constraint"),
        ({"key_type": tf.int32, "key_dtype": tf.int64}, ValueError, "disagree"),
        ({"key_type": tf.float32}, ValueError, "key_dtype"),
        ({"mode": "localized:1"}, ValueError, "rank 1 of 1"),
        ({"mode": "replicated"}, ValueError, "mode"),
        ({"max_capacity": 4, "capacity": 5}, ValueError, "disagree"),
        ({"max_capacity": 0}, ValueError, "max_capacity"),
        ({"init_capacity": -1}, ValueError, "init_capacity"),
        ({"filter_ratio": 0.5}, ValueError, "min_count"),
        ({"evict_strategy": "kCustomized"}, ValueError, "evict_strategy"),
        ({"evict_strategy": "kLru", "evict_policy": "lfu"}, ValueError, "disagree"),
        ({"initializer": "bogus"}, ValueError, "bogus"),
        ({"initializer": True}, ValueError, "per key"),
        ({"no_such_setting": 1}, TypeError, "no_such_setting"),
    ],
)
def test_bad_sok_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        sok.DynamicVariable(4, **kwargs)


def test_dimension_may_be_a_numpy_integer():
    assert sok.DynamicVariable(np.int64(3)).dimension == 3


# --- initializers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "initializer,value",
    [
        (13, 13.0),
        (np.int64(13), 13.0),
        (np.int32(-2), -2.0),
        (np.float32(2.5), 2.5),
        (np.float64(13), 13.0),
        ("13", 13.0),
        ("-0.5", -0.5),
        ("1e-3", 1e-3),
        ("zeros", 0.0),
        ("ones", 1.0),
    ],
)
def test_constant_initializers(initializer, value):
    table = sok.DynamicVariable(4, initializer=initializer)
    np.testing.assert_allclose(tf.gather(table, [3, -8]).numpy(), np.full([2, 4], value))


def test_numpy_scalar_initializes_a_static_variable_too():
    table = sok.Variable(shape=[3, 2], initializer=np.int64(4))
    np.testing.assert_array_equal(table.numpy(), np.full([3, 2], 4.0))


def test_random_is_uniform_within_sok_range_and_a_function_of_the_key():
    table = sok.DynamicVariable(64, initializer="random")
    spec = table.initializer_spec
    assert (spec.kind, spec.a, spec.b) == ("random_uniform", -0.05, 0.05)
    keys = np.arange(200, dtype=np.int64) * 7919
    rows = tf.gather(table, keys).numpy()
    assert rows.min() >= -0.05 and rows.max() <= 0.05
    assert rows.std() > 0.02  # not a constant: uniform on [-0.05, 0.05] has std 0.029
    again = tf.gather(table, keys[::-1]).numpy()[::-1]
    np.testing.assert_array_equal(again, rows)


# --- size -------------------------------------------------------------------------------


def test_size_reads_as_method_and_as_sok_property():
    table = sok.DynamicVariable(dimension=5)
    assert int(table.size()) == 0 and table.size.numpy().tolist() == [0, 5]
    keys = np.arange(100, dtype=np.int64) * 3 - 50
    table.assign(keys, np.random.default_rng(0).random([100, 5]).astype(np.float32))
    size = table.size
    assert size[0] == 100 and int(size[1]) == 5
    assert int(size) == 100 and int(size()) == 100
    assert size().dtype == tf.int64 and size().shape == ()
    shape = tf.convert_to_tensor(size)
    assert shape.dtype == tf.int64 and shape.numpy().tolist() == [100, 5]
    np.testing.assert_array_equal(np.asarray(size), [100, 5])
    assert "rows=100" in repr(size)


def test_size_inside_tf_function():
    table = sok.DynamicVariable(2)

    @tf.function
    def count(keys):
        tf.gather(table, keys)
        return table.size(), table.size[0], tf.convert_to_tensor(table.size)

    rows, first, shape = count(tf.constant([4, 4, 9], tf.int64))
    assert int(rows) == int(first) == 2 and shape.numpy().tolist() == [2, 2]


# --- tf.nn.embedding_lookup / tf.gather ---------------------------------------------------


def test_embedding_lookup_and_gather_read_the_stored_rows():
    table = sok.DynamicVariable(3, initializer=keras.initializers.RandomNormal(seed=7))
    keys = tf.constant([[2**40, -5], [7, 2**40]], tf.int64)
    out = tf.nn.embedding_lookup(table, keys)
    assert out.shape == (2, 2, 3)
    rows = rows_by_key(table)
    assert sorted(rows) == [-5, 7, 2**40]
    expected = np.stack([[rows[k] for k in r] for r in keys.numpy().tolist()])
    np.testing.assert_array_equal(out.numpy(), expected)
    np.testing.assert_array_equal(tf.gather(table, keys).numpy(), expected)
    # The same rows as lookup_sparse with one key per sample.
    ragged = tf.RaggedTensor.from_tensor(tf.reshape(keys, [-1, 1]))
    np.testing.assert_array_equal(sok.lookup_sparse(table, ragged).numpy(), expected.reshape(4, 3))


def test_embedding_lookup_accepts_python_lists_int32_scalars_and_max_norm():
    table = sok.DynamicVariable(2, initializer="3")
    assert tf.nn.embedding_lookup(table, [1, 2, 1]).shape == (3, 2)
    assert tf.gather(table, tf.constant(4, tf.int32)).shape == (2,)
    clipped = tf.nn.embedding_lookup(table, [1], max_norm=1.0).numpy()
    np.testing.assert_allclose(np.linalg.norm(clipped, axis=1), [1.0], rtol=1e-6)
    assert sorted(rows_by_key(table)) == [1, 2, 4]


def test_embedding_lookup_rejects_bad_keys():
    int32_table = sok.DynamicVariable(2, key_type=tf.int32)
    with pytest.raises(ValueError, match="keys must be int32"):
        tf.nn.embedding_lookup(int32_table, tf.constant([1], tf.int64))
    with pytest.raises(ValueError, match="int32 or int64"):
        tf.gather(sok.DynamicVariable(2), tf.constant([1.0]))


def test_dense_reads_and_updates_are_refused_clearly():
    table = sok.DynamicVariable(2, name="t")
    for read in (table.value, table.read_value, table.numpy, lambda: tf.convert_to_tensor(table)):
        with pytest.raises(ValueError, match="no dense value.*tf.gather"):
            read()
    with pytest.raises(NotImplementedError, match="tf.gather"):
        table.gather_nd([[1]])
    update = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([1], tf.int64))
    for method in ("scatter_sub", "scatter_add", "scatter_update"):
        with pytest.raises(NotImplementedError, match=f"{method}.*OptimizerWrapper"):
            getattr(table, method)(update)
    with pytest.raises(NotImplementedError, match="assign_add"):
        table.assign_add(tf.ones([1, 2]))


# --- gradients and optimizers -------------------------------------------------------------


def lookup_loss(table, keys, weights):
    emb = tf.nn.embedding_lookup(table, keys)
    return tf.reduce_sum(emb * weights)


def test_gradient_is_indexed_slices_over_the_keys():
    table = sok.DynamicVariable(2, initializer="1")
    keys = tf.constant([2**40, -3, 2**40], tf.int64)
    weights = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    with tf.GradientTape() as tape:
        loss = lookup_loss(table, keys, weights)
    (grad,) = tape.gradient(loss, [table])
    assert isinstance(grad, tf.IndexedSlices)
    per_key = {}
    for key, value in zip(grad.indices.numpy().tolist(), grad.values.numpy()):
        per_key[key] = per_key.get(key, 0) + value
    assert sorted(per_key) == [-3, 2**40]
    np.testing.assert_array_equal(per_key[2**40], [6.0, 8.0])
    np.testing.assert_array_equal(per_key[-3], [3.0, 4.0])


@pytest.mark.parametrize("compiled", [False, True])
def test_sgd_step_through_embedding_lookup_matches_numpy(compiled):
    lr = 0.25
    table = sok.DynamicVariable(3, initializer=keras.initializers.RandomUniform(seed=3))
    untouched = [10, 11, 2**50]
    tf.gather(table, untouched)  # stored rows that the step does not look up
    keys = np.array([[4, 9], [4, -(2**40)]], np.int64)
    weights = np.random.default_rng(1).standard_normal([2, 2, 3]).astype(np.float32)
    tf.gather(table, keys)
    before = rows_by_key(table)
    optimizer = sok.OptimizerWrapper(keras.optimizers.SGD(learning_rate=lr))

    def step(k, w):
        with tf.GradientTape() as tape:
            loss = lookup_loss(table, k, w)
        grads = tape.gradient(loss, [table])
        optimizer.apply_gradients(zip(grads, [table]))
        return loss

    (tf.function(step) if compiled else step)(tf.constant(keys), tf.constant(weights))

    # NumPy: d loss / d row(k) = sum of the weights at k's positions.
    expected = dict(before)
    for k, w in zip(keys.reshape(-1).tolist(), weights.reshape(-1, 3)):
        expected[k] = expected[k] - lr * w
    after = rows_by_key(table)
    assert sorted(after) == sorted(before)
    for k in after:
        np.testing.assert_allclose(after[k], expected[k], rtol=1e-6, atol=1e-7, err_msg=str(k))
    for k in untouched:
        np.testing.assert_array_equal(after[k], before[k])


def test_adam_in_optimizer_scope_matches_keras_on_a_dense_copy():
    keys = tf.constant([5, 2**40, 5, -1], tf.int64)  # every step: the same keys
    order = [5, 2**40, -1]
    rng = np.random.default_rng(2)
    weights = [rng.standard_normal([4, 2]).astype(np.float32) for _ in range(3)]
    table = sok.DynamicVariable(2, initializer=keras.initializers.RandomNormal(seed=5))
    tf.gather(table, keys)
    dense = tf.Variable(np.stack([rows_by_key(table)[k] for k in order]))
    dense_keys = tf.constant([order.index(k) for k in keys.numpy().tolist()])
    ours, reference = keras.optimizers.Adam(0.05), keras.optimizers.Adam(0.05)
    for w in weights:
        with tf.GradientTape() as tape:
            loss = lookup_loss(table, keys, w)
        with sok.OptimizerScope([table]):
            ours.apply_gradients(zip(tape.gradient(loss, [table]), [table]))
        with tf.GradientTape() as tape:
            loss = lookup_loss(dense, dense_keys, w)
        # Dense: Keras' Adam squares the slices of a repeated key before summing them.
        (grad,) = tape.gradient(loss, [dense])
        reference.apply_gradients([(tf.convert_to_tensor(grad), dense)])
    rows = rows_by_key(table)
    np.testing.assert_allclose(
        np.stack([rows[k] for k in order]), dense.numpy(), rtol=1e-5, atol=1e-6
    )


def _stepper(route: str, optimizer):
    """apply_gradients of `optimizer` through sok.OptimizerWrapper or inside OptimizerScope."""
    if route == "wrapper":
        return sok.OptimizerWrapper(optimizer).apply_gradients

    def step(pairs):
        with sok.OptimizerScope([v for _, v in pairs]):
            optimizer.apply_gradients(pairs)

    return step


@pytest.mark.parametrize("route", ["wrapper", "scope"])
def test_a_dense_gradient_for_a_hash_table_is_refused_before_any_update(route):
    # A plain tensor has no keys: its row i is not key i. Nothing of the step may be applied,
    # not even the valid gradients given before it.
    table = sok.DynamicVariable(2, initializer="1", name="hashed_users")
    static = sok.Variable(np.ones([3, 2]), dtype=tf.float32)
    optimizer = keras.optimizers.Adam(0.1)
    keys = tf.constant([0, 1, 2], tf.int64)
    sparse = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([1], tf.int64))
    step = _stepper(route, optimizer)
    # A first step stores slots, so that a change of them would show.
    step([(sparse, static), (tf.IndexedSlices(tf.ones([3, 2]), keys), table)])
    before = rows_by_key(table, with_slots=True)
    static_before, step_before = static.numpy(), int(optimizer.iterations)
    pairs = [(sparse, static), (tf.ones([3, 2]), table)]
    with pytest.raises(ValueError, match="hashed_users.*IndexedSlices"):
        step(pairs)
    after = rows_by_key(table, with_slots=True)
    assert sorted(after) == sorted(before)
    for key in before:
        np.testing.assert_array_equal(after[key], before[key])
    np.testing.assert_array_equal(static.numpy(), static_before)
    assert int(optimizer.iterations) == step_before


def test_several_ranks_gather_and_localized_tables():
    """Two replicas of a MirroredStrategy (one process, two logical CPUs): tf.gather exchanges
    keys with their owners, and a localized:1 table stores every key on rank 1."""
    script = textwrap.dedent(
        """
        from tests.distributed.workers.strategy_setup import make_strategy

        strategy = make_strategy("mirrored")
        import keras, tensorflow as tf, sok_lite as sok

        with strategy.scope():
            sok.init()
            hashed = sok.DynamicVariable(2, "1", name="hashed")
            local = sok.DynamicVariable(2, "1", mode="localized:1", name="local")
            optimizer = keras.optimizers.SGD(0.5)
        tables = [hashed, local]
        assert local.shards[0].target_gpu == 1 and local.mode == "localized:1"


        def rank_step(keys):
            with tf.GradientTape() as tape:
                a = tf.gather(hashed, keys)
                b = sok.lookup_sparse(local, tf.expand_dims(keys, 1))
                loss = tf.reduce_sum(a) + tf.reduce_sum(b)
            grads = tape.gradient(loss, tables)
            with sok.OptimizerScope(tables):
                optimizer.apply_gradients(zip(grads, tables))
            return loss


        @tf.function
        def step(keys):
            return strategy.reduce("SUM", strategy.run(rank_step, args=(keys,)), axis=None)


        keys = strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant([10 + ctx.replica_id_in_sync_group, 20, 20], tf.int64)
        )
        assert float(step(keys)) == 24.0
        for table in tables:
            rows = {}
            for rank, shard in zip(table.ranks, table.shards):
                k, v = shard.export()
                for key, row in zip(k.numpy().tolist(), v.numpy().tolist()):
                    assert key not in rows
                    rows[key] = (rank, row)
            # Key 20: looked up twice on each of the two ranks, gradient 4, row 1 - 0.5 * 4.
            values = {key: row for key, (_, row) in rows.items()}
            assert values == {10: [0.5, 0.5], 11: [0.5, 0.5], 20: [-1.0, -1.0]}, values
            if table is local:
                assert {rank for rank, _ in rows.values()} == {1}
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stdout + result.stderr[-5000:]
