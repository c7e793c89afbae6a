"""Keras mixed precision with sok_lite tables: layers compute in 16 bits over float32 tables;
under mixed_float16, compile's LossScaleOptimizer around sok_lite.keras.OptimizerWrapper
unscales table gradients, skips non-finite steps for tables too and keeps them sparse."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.keras import Embedding, EmbeddingCollection, FeatureSpec, OptimizerWrapper
from tests.keras.test_keras_fit import (
    BATCH,
    DIM,
    ROWS,
    STEPS,
    dataset,
    fit_counting_traces,
    looked_up_tables,
    shared_table_model,
)

POLICIES = {"mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}
# Keras' default initial loss scale; no step here overflows at it, and it grows only after
# 2,000 finite steps, so the tape loops below may use it as a constant.
INITIAL_SCALE = 2.0**15


@pytest.fixture(autouse=True)
def restore_global_policy():
    saved = keras.mixed_precision.global_policy()
    yield
    keras.mixed_precision.set_global_policy(saved)


def twin_models():
    """Two models with equal weights, built under the current global policy."""
    a, b = shared_table_model(), shared_table_model()
    b.set_weights(a.get_weights())
    return a, b


def hashed_collection():
    return EmbeddingCollection(
        [
            FeatureSpec("user", output_dim=DIM, initializer=keras.initializers.RandomNormal(1)),
            FeatureSpec("item", ROWS, DIM),
        ],
        name="features",
    )


def hashed_model():
    inputs = {
        "user": keras.Input(shape=(None,), dtype="int64", ragged=True, name="user"),
        "item": keras.Input(shape=(None,), dtype="int64", ragged=True, name="item"),
    }
    out = hashed_collection()(inputs)
    h = keras.layers.Concatenate()([out["user"], out["item"]])
    h = keras.layers.Dense(8, activation="tanh")(h)
    return keras.Model(inputs, keras.layers.Dense(1)(h))


def hashed_dataset(seed):
    rng = np.random.default_rng(seed)
    n = BATCH * STEPS
    users = [list(rng.integers(-(2**62), 2**62, rng.integers(1, 3))) for _ in range(n)]
    items = [list(rng.integers(0, ROWS // 2, rng.integers(1, 4))) for _ in range(n)]
    x = {
        "user": tf.ragged.constant(users, dtype=tf.int64, ragged_rank=1),
        "item": tf.ragged.constant(items, dtype=tf.int64, ragged_rank=1),
    }
    y = rng.standard_normal([n, 1]).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)


def hash_rows(table) -> dict:
    """{key: value and slots} of a hash table."""
    keys, rows = table.export(with_slots=True)
    return dict(zip(keys.numpy().tolist(), rows.numpy()))


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_layers_compute_in_the_policy_dtype_over_float32_tables(policy):
    keras.mixed_precision.set_global_policy(policy)
    ids = tf.ragged.constant([[1, 2], [3]], dtype=tf.int64)
    fixed, hashed, collection = Embedding(ROWS, DIM), Embedding(output_dim=DIM), hashed_collection()
    with tf.GradientTape(persistent=True) as tape:
        outputs = [fixed(ids), hashed(ids), *collection({"user": ids, "item": ids}).values()]
        loss = tf.add_n([tf.reduce_sum(tf.cast(out, tf.float32)) for out in outputs])
    tables = [fixed.embeddings, hashed.embeddings, *collection.tables.values()]
    assert [out.dtype.name for out in outputs] == [POLICIES[policy]] * 4
    assert [t.dtype for t in tables] == [tf.float32] * 4
    for grad in tape.gradient(loss, tables):
        assert isinstance(grad, tf.IndexedSlices) and grad.values.dtype == tf.float32
    symbolic = Embedding(ROWS, DIM)(keras.Input(shape=(None,), dtype="int64", ragged=True))
    assert symbolic.dtype == POLICIES[policy]


def tape_training(model, optimizer, data, loss_scale=1.0):
    """The reference: a GradientTape loop, in a tf.function as fit's step is (so that both
    round alike), applying through sok.OptimizerWrapper the gradients of the loss times
    `loss_scale` divided by it."""
    loss_fn = keras.losses.MeanSquaredError()
    wrapper = sok.OptimizerWrapper(optimizer)
    wrapper.build(model.trainable_variables)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            scaled = loss_fn(y, model(x, training=True)) * loss_scale
        grads = tape.gradient(scaled, model.trainable_variables)
        unscaled = [
            tf.IndexedSlices(g.values / loss_scale, g.indices, g.dense_shape)
            if isinstance(g, tf.IndexedSlices)
            else g / loss_scale
            for g in grads
        ]
        wrapper.apply_gradients(zip(unscaled, model.trainable_variables))

    for x, y in data:
        step(x, y)


def test_fit_under_mixed_bfloat16_equals_a_gradient_tape_loop():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    fitted, manual = twin_models()
    data = dataset(seed=0)
    fitted.compile(optimizer=OptimizerWrapper(keras.optimizers.SGD(0.1, momentum=0.9)), loss="mse")
    assert not isinstance(fitted.optimizer, keras.optimizers.LossScaleOptimizer)
    fitted.fit(data, epochs=1, verbose=0, shuffle=False)
    tape_training(manual, keras.optimizers.SGD(0.1, momentum=0.9), data)

    for got, want in zip(fitted.get_weights(), manual.get_weights(), strict=True):
        # Both run the same graph in bfloat16 (epsilon 2**-7) and agree to the bit here; a
        # summation order of its own (another machine) may move a value by an epsilon. Run
        # op by op, outside a graph, the loop would round differently (by a few epsilons).
        np.testing.assert_allclose(got, want, rtol=2**-7, atol=2**-7 * 0.1)
    for table in looked_up_tables(fitted):
        assert table.dtype == tf.float32


def test_fit_under_mixed_float16_unscales_table_gradients_as_a_tape_loop_does():
    keras.mixed_precision.set_global_policy("mixed_float16")
    # Weights where no step overflows at the initial scale: fit would skip such a step, the
    # reference does not.
    keras.utils.set_random_seed(0)
    fitted, manual = twin_models()
    tables = looked_up_tables(fitted)
    initial = [t.numpy() for t in tables]
    data = dataset(seed=1)
    fitted.compile(optimizer=OptimizerWrapper(keras.optimizers.SGD(0.1, momentum=0.9)), loss="mse")
    assert isinstance(fitted.optimizer, keras.optimizers.LossScaleOptimizer)
    assert isinstance(fitted.optimizer.inner_optimizer, OptimizerWrapper)
    fitted.fit(data, epochs=1, verbose=0, shuffle=False)
    tape_training(manual, keras.optimizers.SGD(0.1, momentum=0.9), data, INITIAL_SCALE)

    assert float(fitted.optimizer.dynamic_scale.numpy()) == INITIAL_SCALE  # no step was skipped
    assert int(fitted.optimizer.iterations.numpy()) == STEPS
    for table, before in zip(tables, initial, strict=True):
        assert table.dtype == tf.float32
        assert not np.array_equal(table.numpy(), before)
    for got, want in zip(fitted.get_weights(), manual.get_weights(), strict=True):
        # float16 (epsilon 2**-10), as bfloat16 above. A gradient left scaled, or unscaled
        # twice, would be off by a factor of 2**15.
        np.testing.assert_allclose(got, want, rtol=2**-10, atol=2**-10 * 0.1)


@pytest.mark.parametrize("policy", list(POLICIES))
def test_fit_traces_the_training_step_once(policy):
    # Under mixed_float16 compile puts a LossScaleOptimizer around the wrapper, and Keras builds
    # both inside the first trace of the step; neither may make its variables there.
    keras.mixed_precision.set_global_policy(policy)
    model, losses, traces = fit_counting_traces(seed=9)
    is_scaled = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert is_scaled == (policy == "mixed_float16")
    assert traces == 1
    assert np.isfinite(losses).all()


@pytest.mark.parametrize("make_model_and_data", ["fixed", "hashed"])
def test_fit_under_mixed_float16_trains(make_model_and_data):
    keras.mixed_precision.set_global_policy("mixed_float16")
    keras.utils.set_random_seed(2)
    if make_model_and_data == "fixed":
        model, data = shared_table_model(), dataset(seed=2)
    else:
        model, data = hashed_model(), hashed_dataset(seed=2)
    model.compile(optimizer=OptimizerWrapper(keras.optimizers.Adam(0.02)), loss="mse")
    losses = model.fit(data, epochs=4, verbose=0, shuffle=False).history["loss"]
    assert losses[-1] < losses[0]
    # Some steps may overflow and be skipped (the scale then halves); most are not.
    assert float(model.optimizer.dynamic_scale.numpy()) >= INITIAL_SCALE / 4
    assert int(model.optimizer.iterations.numpy()) > 3 * STEPS


def test_an_overflowing_fit_step_changes_no_table_slot_or_weight_and_halves_the_scale():
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = hashed_model()
    data = hashed_dataset(seed=3).take(1)
    huge = 2.0**120  # the scaled loss fits float32; its float16 gradients overflow
    optimizer = keras.optimizers.LossScaleOptimizer(
        OptimizerWrapper(keras.optimizers.Adam(0.02)), initial_scale=huge
    )
    model.compile(optimizer=optimizer, loss="mse")
    x, _ = next(iter(data))
    model(x)  # stores the batch's keys, so that the step has rows to leave alone
    optimizer.build(model.trainable_variables)
    collection = model.get_layer("features")
    hashed, fixed = collection.tables["user"], collection.tables["item"]
    slots = list(sok.opt_slots(optimizer.inner_optimizer, fixed).values())
    before = {
        "hash rows": hash_rows(hashed),
        "fixed": fixed.numpy(),
        "slots": [s.numpy() for s in slots],
        "dense": [np.asarray(w) for w in sok.filter_variables(model.weights)[1]],
        "dense slots": [np.asarray(v) for v in optimizer.inner_optimizer.inner_optimizer.variables],
    }

    model.fit(data, epochs=1, verbose=0, shuffle=False)

    assert slots, "Adam's row-wise slots of the fixed-size table"
    after_rows = hash_rows(hashed)
    assert after_rows.keys() == before["hash rows"].keys()
    for key, row in before["hash rows"].items():
        np.testing.assert_array_equal(after_rows[key], row)
    np.testing.assert_array_equal(fixed.numpy(), before["fixed"])
    for slot, value in zip(slots, before["slots"], strict=True):
        np.testing.assert_array_equal(slot.numpy(), value)
    for weight, value in zip(sok.filter_variables(model.weights)[1], before["dense"], strict=True):
        np.testing.assert_array_equal(np.asarray(weight), value)
    adam = optimizer.inner_optimizer.inner_optimizer
    for variable, value in zip(adam.variables, before["dense slots"], strict=True):
        np.testing.assert_array_equal(np.asarray(variable), value)
    assert int(optimizer.iterations.numpy()) == 0
    assert float(optimizer.dynamic_scale.numpy()) == huge / 2


@pytest.mark.parametrize("bad", ["fixed table", "hash table", "dense"])
def test_a_non_finite_gradient_anywhere_skips_the_step_for_every_variable(bad):
    keras.mixed_precision.set_global_policy("mixed_float16")
    fixed = sok.Variable(np.ones([ROWS, DIM], np.float32))
    hashed = sok.DynamicVariable(DIM, initializer="random")
    dense = keras.Variable(np.ones([DIM], np.float32))
    variables = [fixed, hashed, dense]
    optimizer = keras.optimizers.LossScaleOptimizer(OptimizerWrapper(keras.optimizers.Adam(0.1)))
    optimizer.build(variables)
    ids = tf.ragged.constant([[1, 2], [3]], dtype=tf.int64)
    with tf.GradientTape() as tape:
        rows = sok.lookup_sparse([fixed, hashed], [ids, ids])
        loss = tf.reduce_sum((rows[0] + rows[1]) * dense) * INITIAL_SCALE
    grads = dict(zip(["fixed table", "hash table", "dense"], tape.gradient(loss, variables)))
    nan = grads[bad]
    if isinstance(nan, tf.IndexedSlices):
        nan = tf.IndexedSlices(nan.values * np.nan, nan.indices, nan.dense_shape)
    else:
        nan = nan * np.nan
    grads[bad] = nan
    before = [fixed.numpy(), hash_rows(hashed), dense.numpy()]
    slots = list(sok.opt_slots(optimizer.inner_optimizer, fixed).values())

    optimizer.apply_gradients(zip(grads.values(), variables))

    np.testing.assert_array_equal(fixed.numpy(), before[0])
    after_rows = hash_rows(hashed)
    for key, row in before[1].items():
        np.testing.assert_array_equal(after_rows[key], row)
    np.testing.assert_array_equal(dense.numpy(), before[2])
    assert all(not np.any(s.numpy()) for s in slots)
    assert int(optimizer.iterations.numpy()) == 0
    assert float(optimizer.dynamic_scale.numpy()) == INITIAL_SCALE / 2


def called_graphs(op):
    """The function graphs `op` runs (cond branches, loop bodies, nested functions)."""
    for attr in op.node_def.attr.values():
        names = [attr.func.name] if attr.HasField("func") else [f.name for f in attr.list.func]
        for name in names:
            graph = op.graph
            while graph is not None and graph._get_function(name) is None:
                graph = getattr(graph, "outer_graph", None)
            if graph is not None:
                yield graph._get_function(name).graph


def graphs_within(graph, seen=None):
    """`graph` and every function graph it runs, however deep."""
    seen = set() if seen is None else seen
    if id(graph) in seen:
        return
    seen.add(id(graph))
    yield graph
    for op in graph.get_operations():
        for inner in called_graphs(op):
            yield from graphs_within(inner, seen)


def ops_with_a_dimension(graph, size: int) -> list[str]:
    return [
        f"{op.type} {op.name}: {out.shape}"
        for g in graphs_within(graph)
        for op in g.get_operations()
        for out in op.outputs
        if out.shape.rank is not None and size in out.shape.as_list()
    ]


BIG_ROWS = 100_003  # a dimension no other tensor of the step has


def test_table_gradients_stay_sparse_through_loss_scaling():
    keras.mixed_precision.set_global_policy("mixed_float16")
    ids_in = keras.Input(shape=(None,), dtype="int64", ragged=True)
    emb = Embedding(BIG_ROWS, DIM, name="emb")(ids_in)
    model = keras.Model(ids_in, keras.layers.Dense(1)(emb))
    model.compile(optimizer=OptimizerWrapper(keras.optimizers.Adam(0.01)), loss="mse")
    model.optimizer.build(model.trainable_variables)
    x = tf.ragged.constant([[1, BIG_ROWS - 1], [7]], dtype=tf.int64)
    y = tf.zeros([2, 1])

    train_step = tf.function(model.train_step).get_concrete_function((x, y))
    assert len(list(graphs_within(train_step.graph))) > 1  # the skip's branches are searched
    assert ops_with_a_dimension(train_step.graph, BIG_ROWS) == []

    # The check sees a densified gradient: Keras' own finite check makes one.
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x))
    grad = tape.gradient(loss, model.get_layer("emb").embeddings)
    keras_check = tf.function(
        lambda values: keras.optimizers.LossScaleOptimizer.check_finite(
            model.optimizer, [tf.IndexedSlices(values, grad.indices, grad.dense_shape)]
        )
    ).get_concrete_function(grad.values)
    assert ops_with_a_dimension(keras_check.graph, BIG_ROWS)


def test_a_loss_scale_optimizer_inside_the_wrapper_is_refused():
    with pytest.raises(ValueError, match="around sok_lite.keras.OptimizerWrapper"):
        OptimizerWrapper(keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam()))


def test_loss_scale_factor_unscales_table_gradients():
    scaled, plain = twin_models()
    data = dataset(seed=4)
    scaled.compile(
        optimizer=OptimizerWrapper(keras.optimizers.SGD(0.1, loss_scale_factor=64.0)),
        loss="mse",
    )
    plain.compile(optimizer=OptimizerWrapper(keras.optimizers.SGD(0.1)), loss="mse")
    scaled.fit(data, epochs=1, verbose=0, shuffle=False)
    plain.fit(data, epochs=1, verbose=0, shuffle=False)
    for got, want in zip(scaled.get_weights(), plain.get_weights(), strict=True):
        # A power of two scales and unscales float32 gradients exactly.
        np.testing.assert_array_equal(got, want)


def test_a_loss_scale_optimizer_turns_the_wrapped_loss_scale_factor_off():
    wrapper = OptimizerWrapper(keras.optimizers.SGD(0.1, loss_scale_factor=64.0))
    assert wrapper.loss_scale_factor == 64.0
    keras.optimizers.LossScaleOptimizer(wrapper)
    assert wrapper.loss_scale_factor is None and wrapper.inner_optimizer.loss_scale_factor is None


class HalvedLoss(OptimizerWrapper):
    """A wrapper with a loss scaling of its own, as a Horovod subclass that makes each rank's
    loss its part of the global mean (1 / num_ranks) has (examples/dlrm/parallel.py)."""

    def scale_loss(self, loss):
        return super().scale_loss(loss) / 2


def test_a_loss_scale_optimizer_keeps_the_wrappers_own_loss_scaling():
    made = keras.optimizers.LossScaleOptimizer(HalvedLoss(keras.optimizers.SGD(0.1)))
    assert float(made.scale_loss(tf.constant(3.0))) == 3.0 * INITIAL_SCALE / 2  # not built yet
    made.build([keras.Variable(np.ones([2], np.float32))])
    made.dynamic_scale.assign(8.0)
    assert float(made.scale_loss(tf.constant(3.0))) == 3.0 * 8.0 / 2
    # A plain wrapper scales by the dynamic scale only: the LossScaleOptimizer turned its
    # loss_scale_factor off.
    plain = keras.optimizers.LossScaleOptimizer(
        OptimizerWrapper(keras.optimizers.SGD(0.1, loss_scale_factor=64.0)), initial_scale=4.0
    )
    assert float(plain.scale_loss(tf.constant(3.0))) == 12.0


def test_fit_under_mixed_float16_keeps_the_wrappers_own_loss_scaling():
    keras.mixed_precision.set_global_policy("mixed_float16")
    keras.utils.set_random_seed(0)
    halved, plain = twin_models()
    data = dataset(seed=1)
    # Half the loss with SGD is half the learning rate.
    halved.compile(optimizer=HalvedLoss(keras.optimizers.SGD(0.1)), loss="mse")
    plain.compile(optimizer=OptimizerWrapper(keras.optimizers.SGD(0.05)), loss="mse")
    assert isinstance(halved.optimizer, keras.optimizers.LossScaleOptimizer)
    halved.fit(data, epochs=1, verbose=0, shuffle=False)
    plain.fit(data, epochs=1, verbose=0, shuffle=False)
    assert float(halved.optimizer.dynamic_scale.numpy()) == INITIAL_SCALE  # no step skipped
    for got, want in zip(halved.get_weights(), plain.get_weights(), strict=True):
        # Scaling by powers of two is exact; 0.1 * g / 2 and 0.05 * g differ by a float32
        # rounding, far below float16's epsilon (2**-10). Dropping the halving would make
        # every update twice as large.
        np.testing.assert_allclose(got, want, rtol=2**-10, atol=2**-10 * 0.1)


def test_a_saved_mixed_float16_model_resumes_with_its_scale_and_sparse_check(tmp_path):
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = shared_table_model()
    model.compile(
        optimizer=keras.optimizers.LossScaleOptimizer(
            OptimizerWrapper(keras.optimizers.Adam(0.05)), initial_scale=2.0**10
        ),
        loss="mse",
    )
    model.fit(dataset(seed=5), epochs=1, verbose=0, shuffle=False)
    model.save(str(tmp_path / "model.keras"))
    loaded = keras.models.load_model(str(tmp_path / "model.keras"))
    assert isinstance(loaded.optimizer, keras.optimizers.LossScaleOptimizer)
    assert isinstance(loaded.optimizer.inner_optimizer, OptimizerWrapper)
    for got, want in zip(loaded.optimizer.variables, model.optimizer.variables, strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))

    model.fit(dataset(seed=6), epochs=1, verbose=0, shuffle=False)
    loaded.fit(dataset(seed=6), epochs=1, verbose=0, shuffle=False)
    assert "check_finite" in vars(loaded.optimizer)  # the sparse check, set when built
    for got, want in zip(loaded.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
