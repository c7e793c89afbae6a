"""model.compile/fit/evaluate/predict with sok_lite.keras.OptimizerWrapper, one process."""

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.keras import Embedding, EmbeddingCollection, FeatureSpec, OptimizerWrapper

ROWS, DIM, BATCH, STEPS = 40, 4, 16, 6
USED_ROWS = ROWS // 2  # ids only come from here: the other rows must not change


def dataset(seed):
    rng = np.random.default_rng(seed)
    n = BATCH * STEPS
    ids = [list(rng.integers(0, USED_ROWS, rng.integers(1, 5))) for _ in range(n)]
    x = tf.ragged.constant(ids, dtype=tf.int64, ragged_rank=1)
    y = rng.standard_normal([n, 1]).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)


def shared_table_model():
    """An Embedding, and two features sharing one table (their gradients add up)."""
    ids = keras.Input(shape=(None,), dtype="int64", ragged=True)
    shared = EmbeddingCollection(
        [
            FeatureSpec("a", ROWS, DIM, table="shared"),
            FeatureSpec("b", ROWS, DIM, combiner="sqrtn", table="shared"),
        ],
        name="shared",
    )([ids, ids])
    h = keras.layers.Concatenate()(
        [Embedding(ROWS, DIM, combiner="mean", name="emb")(ids)] + shared
    )
    h = keras.layers.Dense(8, activation="tanh")(h)
    return keras.Model(ids, keras.layers.Dense(1)(h))


def looked_up_tables(model):
    return [model.get_layer("emb").embeddings, model.get_layer("shared").tables["shared"]]


def twin_models():
    """Two models with equal weights."""
    a, b = shared_table_model(), shared_table_model()
    b.set_weights(a.get_weights())
    return a, b


def manual_training(model, optimizer, data, route):
    """The reference: a GradientTape loop, tables routed by sok.OptimizerScope or by the
    plain sok.OptimizerWrapper."""
    loss_fn = keras.losses.MeanSquaredError()
    tables, _ = sok.filter_variables(model.trainable_variables)
    for x, y in data:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        if route == "scope":
            with sok.OptimizerScope(tables):
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
        else:
            sok.OptimizerWrapper(optimizer).apply_gradients(zip(grads, model.trainable_variables))


@pytest.fixture
def float64():
    """Layers, tables and losses in float64 for the test's duration."""
    floatx, policy = keras.config.floatx(), keras.config.dtype_policy()
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")
    yield
    keras.config.set_floatx(floatx)
    keras.config.set_dtype_policy(policy)


@pytest.mark.parametrize(
    "make_optimizer",
    [
        lambda: keras.optimizers.Adam(0.05),
        lambda: keras.optimizers.SGD(0.1, momentum=0.9),
        lambda: keras.optimizers.Adagrad(0.2),
    ],
    ids=["adam", "momentum", "adagrad"],
)
@pytest.mark.parametrize("route", ["scope", "wrapper"])
def test_fit_equals_a_manual_loop_and_touches_only_looked_up_rows(make_optimizer, route, float64):
    # In float64: in float32, fit and the manual loop differ in the last bits (summation order,
    # oneDNN's thread-dependent reductions), which Adam divides by sqrt(v), so a near-zero
    # weight moved by up to 4e-5 relative. In float64 they agree to far below the tolerance
    # (bit for bit when measured, oneDNN and one thread too), and a learning rate off by 1e-6
    # relative moves most weights beyond it (by up to ~1e-6).
    fitted, manual = twin_models()
    assert fitted.get_layer("emb").embeddings.dtype == tf.float64
    tables = looked_up_tables(fitted)
    initial = [t.numpy() for t in tables]
    data = dataset(seed=0)

    fitted.compile(optimizer=OptimizerWrapper(make_optimizer()), loss="mse")
    fitted.fit(data, epochs=1, verbose=0, shuffle=False)
    manual_training(manual, make_optimizer(), data, route)

    for table, before in zip(tables, initial, strict=True):
        after = table.numpy()
        np.testing.assert_array_equal(after[USED_ROWS:], before[USED_ROWS:])
        assert np.all(np.any(after[:USED_ROWS] != before[:USED_ROWS], axis=1))
    assert fitted.optimizer.iterations.numpy() == STEPS
    for got, want in zip(fitted.get_weights(), manual.get_weights(), strict=True):
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    for table in tables:
        slots = sok.opt_slots(fitted.optimizer.inner_optimizer, table)
        assert slots and all(s.shape == table.shape for s in slots.values())


def test_evaluate_and_predict_equal_direct_calls():
    model = shared_table_model()
    model.compile(optimizer=OptimizerWrapper(keras.optimizers.Adam(0.01)), loss="mse")
    data = dataset(seed=1)
    x_all = tf.concat([x for x, _ in data], 0)
    y_all = np.concatenate([y.numpy() for _, y in data])
    direct = model(x_all).numpy()
    np.testing.assert_allclose(model.predict(data, verbose=0), direct, rtol=1e-5, atol=1e-7)
    loss = model.evaluate(data, verbose=0)
    np.testing.assert_allclose(loss, np.mean((direct - y_all) ** 2), rtol=1e-5)


class TwoTowers(keras.Model):
    def __init__(self):
        super().__init__()
        self.emb = Embedding(ROWS, DIM)
        self.head = keras.layers.Dense(1)

    def call(self, x):
        return self.head(self.emb(x))


def test_subclassed_model_builds_inside_fit():
    model = TwoTowers()
    model.compile(optimizer=OptimizerWrapper(sok.optimizers.Adam(0.05)), loss="mse")
    history = model.fit(dataset(seed=2), epochs=3, verbose=0, shuffle=False)
    losses = history.history["loss"]
    assert losses[-1] < losses[0]
    assert isinstance(model.emb.embeddings, sok.Variable)


class CountsTraces(keras.Model):
    """A functional model that counts how often Keras traces its training step."""

    traces = 0

    def train_step(self, data):
        type(self).traces += 1  # Python: runs once per trace, not per step
        return super().train_step(data)


def fit_counting_traces(seed):
    """(model, losses, traces of its training step) of 2 epochs of fit with the wrapped Adam."""
    plain = shared_table_model()
    CountsTraces.traces = 0
    model = CountsTraces(plain.inputs, plain.outputs)
    model.compile(optimizer=OptimizerWrapper(keras.optimizers.Adam(0.05)), loss="mse")
    losses = model.fit(dataset(seed), epochs=2, verbose=0, shuffle=False).history["loss"]
    return model, losses, CountsTraces.traces


def test_fit_traces_the_training_step_once():
    # Keras builds the optimizer inside the first trace; were the slots made there, tf.function
    # would trace the whole step a second time to leave their creation out.
    model, losses, traces = fit_counting_traces(seed=7)
    assert traces == 1
    assert model.optimizer.iterations.numpy() == 2 * STEPS
    assert np.isfinite(losses).all()
    slots = sok.opt_slots(model.optimizer.inner_optimizer, model.get_layer("emb").embeddings)
    assert sorted(slots) == ["m", "v"] and all(np.any(s.numpy() != 0) for s in slots.values())


@pytest.mark.parametrize("route", ["wrapper", "scope"])
def test_a_custom_loop_builds_the_optimizer_in_its_first_trace(float64, route):
    # Keras builds an optimizer inside the trace that first applies it; the wrapper (in its
    # build) and OptimizerScope (before it hands the dense pairs to Keras) build it eagerly,
    # so tf.function traces the step once.
    model, reference = twin_models()
    data = dataset(seed=8)
    adam = keras.optimizers.Adam(0.05)
    optimizer = OptimizerWrapper(adam) if route == "wrapper" else adam
    tables, _ = sok.filter_variables(model.trainable_variables)
    loss_fn = keras.losses.MeanSquaredError()
    traces = []

    @tf.function(input_signature=list(data.element_spec))
    def step(x, y):
        traces.append(1)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        with sok.OptimizerScope(tables) if route == "scope" else contextlib.nullcontext():
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

    for x, y in data:
        step(x, y)
    assert len(traces) == 1 and optimizer.built
    manual_training(reference, keras.optimizers.Adam(0.05), data, route)
    for got, want in zip(model.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_a_model_of_tables_only_advances_iterations():
    ids = keras.Input(shape=(None,), dtype="int64", ragged=True)
    model = keras.Model(ids, Embedding(ROWS, 1, name="emb")(ids))
    model.compile(optimizer=OptimizerWrapper(keras.optimizers.SGD(0.1)), loss="mse")
    model.fit(dataset(seed=3), epochs=1, verbose=0, shuffle=False)
    assert model.optimizer.iterations.numpy() == STEPS


def test_wrapper_delegates_and_serializes():
    inner = keras.optimizers.Adam(0.01, beta_1=0.8)
    opt = OptimizerWrapper(inner)
    opt.learning_rate = 0.02
    assert float(inner.learning_rate) == pytest.approx(0.02)
    assert opt.iterations is inner.iterations
    copy = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
    assert isinstance(copy, OptimizerWrapper)
    assert copy.inner_optimizer.get_config()["beta_1"] == pytest.approx(0.8)
    assert float(copy.learning_rate) == pytest.approx(0.02)


def test_wrapper_rejects_what_it_cannot_apply():
    with pytest.raises(TypeError, match="keras.optimizers.Optimizer"):
        OptimizerWrapper(object())
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        OptimizerWrapper(keras.optimizers.SGD(gradient_accumulation_steps=2))


def test_saved_model_resumes_training_with_its_table_slots(tmp_path):
    model = shared_table_model()
    model.compile(optimizer=OptimizerWrapper(keras.optimizers.Adam(0.05)), loss="mse")
    model.fit(dataset(seed=4), epochs=1, verbose=0, shuffle=False)
    model.save(str(tmp_path / "model.keras"))
    loaded = keras.models.load_model(str(tmp_path / "model.keras"))
    assert isinstance(loaded.optimizer, OptimizerWrapper)
    assert len(loaded.optimizer.variables) == len(model.optimizer.variables)
    for got, want in zip(loaded.optimizer.variables, model.optimizer.variables, strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))

    model.fit(dataset(seed=5), epochs=1, verbose=0, shuffle=False)
    loaded.fit(dataset(seed=5), epochs=1, verbose=0, shuffle=False)
    for got, want in zip(loaded.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_checkpoint_holds_table_slots(tmp_path):
    model = shared_table_model()
    model.compile(optimizer=OptimizerWrapper(keras.optimizers.Adagrad(0.1)), loss="mse")
    model.fit(dataset(seed=6), epochs=1, verbose=0, shuffle=False)
    table = model.get_layer("emb").embeddings
    accumulator = sok.opt_slots(model.optimizer.inner_optimizer, table)["accumulator"]
    saved = accumulator.numpy()
    path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).save(str(tmp_path / "c"))
    accumulator.assign(tf.zeros_like(accumulator))
    tf.train.Checkpoint(model=model, optimizer=model.optimizer).restore(path).assert_consumed()
    np.testing.assert_array_equal(accumulator.numpy(), saved)
