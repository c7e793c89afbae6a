"""What a new user meets first: the optimizer scope over a whole model, readable op errors, the
replica count of the mirrored demo, and NaN checks that reach our ops."""

import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from tests.module_from_file import module_from_file

REPO = pathlib.Path(__file__).resolve().parents[2]


class EmbeddingModel(keras.Model):
    """A sok_lite table and a Dense layer (keras.Variable weights)."""

    def __init__(self):
        super().__init__()
        self.embedding = sok.keras.Embedding(10, 4)
        self.dense = keras.layers.Dense(1)

    def call(self, ids):
        return self.dense(self.embedding(ids))


def embedding_model():
    model = EmbeddingModel()
    model(tf.ragged.constant([[1]], dtype=tf.int64))
    return model


def test_optimizer_scope_and_wrapper_take_every_variable_of_a_model():
    ids = tf.ragged.constant([[1, 2], [2]], dtype=tf.int64)
    for way in ("scope", "wrapper"):
        model = embedding_model()
        table, *dense = model.trainable_variables
        assert isinstance(dense[0], keras.Variable) and not isinstance(dense[0], tf.Variable)
        before = table.numpy()
        reference = [keras.Variable(v.numpy()) for v in dense]
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(ids))
        grads = tape.gradient(loss, model.trainable_variables)
        if way == "scope":
            opt = keras.optimizers.Adam(0.1)
            with sok.OptimizerScope(model.trainable_variables):
                opt.apply_gradients(zip(grads, model.trainable_variables))
        else:
            opt = sok.OptimizerWrapper(keras.optimizers.Adam(0.1))
            opt.apply_gradients(zip(grads, model.trainable_variables))
        keras.optimizers.Adam(0.1).apply_gradients(zip(grads[1:], reference))
        for v, ref in zip(dense, reference):  # exactly Keras' update
            np.testing.assert_array_equal(v.numpy(), ref.numpy(), err_msg=way)
        changed = np.any(table.numpy() != before, axis=1)  # row-wise: touched rows only
        assert changed.tolist() == [False, True, True] + [False] * 7, way
        assert int(opt.iterations) == 1


def test_optimizer_scope_rejects_what_is_no_variable():
    with pytest.raises(TypeError, match="takes variables.*got ndarray"):
        sok.OptimizerScope([np.zeros([2, 2], np.float32)])


def error_of(fn) -> tf.errors.OpError:
    with pytest.raises(tf.errors.OpError) as info:
        fn()
    return info.value


def test_op_errors_read_as_the_kernel_sentence():
    table = sok.Variable(np.ones([3, 2]), dtype=tf.float32, name="t")
    hashed = sok.DynamicVariable(2, name="d")
    grad = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([7], tf.int64))
    bad_ids = tf.ragged.constant([[10]], dtype=tf.int64)

    def apply():
        with sok.OptimizerScope([table]):
            keras.optimizers.SGD(0.1).apply_gradients([(grad, table)])

    cases = [
        (lambda: sok.lookup_sparse(table, bad_ids), "id 10 of sample 0 is out of range [0, 3)"),
        (apply, "'t': gradient row 7 is out of range [0, 3)"),
        (lambda: hashed.evict(-1), "steps_unseen must be >= 1"),
    ]
    for fn, sentence in cases:
        e = error_of(fn)
        assert type(e) is tf.errors.InvalidArgumentError
        assert str(e) == e.message and e.message.endswith(sentence), e.message
        assert "{{" not in e.message and "[Op:" not in e.message
    # In a tf.function the error comes from the function call, worded by TF (node, where it
    # was defined): not cleaned, but the sentence is in it.
    lookup = tf.function(lambda ids: sok.lookup_sparse(table, ids))
    e = error_of(lambda: lookup(bad_ids))
    assert type(e) is tf.errors.InvalidArgumentError
    assert "id 10 of sample 0 is out of range [0, 3)" in e.message


def test_clean_message_leaves_other_errors_alone():
    from sok_lite._errors import clean_message

    other = "{{function_node __wrapped__MatMul_device_/CPU:0}} bad shapes [Op:MatMul] name: "
    assert clean_message(other) == other
    assert clean_message("SokLite plain") == "SokLite plain"


def load_demo():
    return module_from_file(REPO / "examples" / "sok_classic_demo.py", "sok_classic_demo")


def test_mirrored_demo_says_how_many_replicas_run(capsys):
    demo = load_demo()
    assert demo.replicas_line(1, "CPU") == (
        "MirroredStrategy: 1 replica (1 CPU device; see docs/distributed.md to make 2 logical "
        "CPU devices)"
    )
    assert demo.replicas_line(2, "GPU") == "MirroredStrategy: 2 replicas (2 GPU devices)"
    strategy = demo.make_strategy("mirrored")
    printed = capsys.readouterr().out
    assert f"MirroredStrategy: {strategy.num_replicas_in_sync} replica" in printed


@pytest.fixture
def check_numerics():
    tf.debugging.enable_check_numerics()
    try:
        yield
    finally:
        tf.debugging.disable_check_numerics()


def test_check_numerics_state_is_read():
    from sok_lite._tf_internals import check_numerics_enabled

    assert not check_numerics_enabled()
    tf.debugging.enable_check_numerics()
    try:
        assert check_numerics_enabled()
    finally:
        tf.debugging.disable_check_numerics()
    assert not check_numerics_enabled()


@pytest.mark.usefixtures("check_numerics")
@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("in_function", [False, True])
def test_check_numerics_catches_bad_values_in_our_ops(bad, in_function):
    static = sok.Variable(np.ones([3, 2]), dtype=tf.float32, name="static")
    hashed = sok.DynamicVariable(2, initializer="ones", name="hashed")
    ids = tf.ragged.constant([[1, 2]], dtype=tf.int64)
    opt = keras.optimizers.Adam(0.1)

    # Arguments, not constants: in a graph, TF checks the constants themselves.
    def lookup(table, weights):
        return sok.lookup_sparse(table, ids, sp_weights=weights)

    def step(table, indices, values):
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(tf.IndexedSlices(values, indices), table)])

    if in_function:
        lookup, step = tf.function(lookup), tf.function(step)
    weights = tf.RaggedTensor.from_row_splits(tf.constant([1.0, bad]), [0, 2])
    # Forward: TF checks the float outputs of our ops.
    for table, op in [(static, "SokLiteSegmentCombine"), (hashed, "SokLiteDynamicLookupCombine")]:
        with pytest.raises(tf.errors.InvalidArgumentError, match=f'NaN in output 0 of .*"{op}"'):
            lookup(table, weights)
    # The row-wise updates have no output: their gradient is checked before they run.
    bad_grad = tf.constant([[bad, 1.0]], tf.float32)
    for table, message in [
        (static, "'static' given to SokLiteSparseApply"),
        (hashed, "'hashed' given to SokLiteDynamicApply"),
    ]:
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            step(table, tf.constant([1], tf.int64), bad_grad)
    assert np.all(static.numpy() == 1.0)
    _, rows = hashed.export()
    assert np.all(rows.numpy() == 1.0)
