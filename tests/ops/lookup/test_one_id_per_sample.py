"""Dense ids of one id a sample on one rank: the rows are read straight into the output (one
per-sample gather, no deduplication first) and the gradient is deduplicated afterwards. Both
must equal, bit for bit, the deduplicated lookup of the same ids given as a RaggedTensor."""

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok

# Every test runs on each device present (tests/ops/conftest.py), its tables and ops there.
pytestmark = pytest.mark.usefixtures("device")

ROWS, DIM, BATCH = 40, 5, 96


def twin_tables(dtype, kind="sok"):
    """Two tables holding the same values: one looked up per sample, one deduplicated."""
    values = np.random.default_rng(3).standard_normal([ROWS, DIM])
    if kind == "sok":
        return [sok.Variable(values, dtype=dtype, name=f"t{i}") for i in range(2)]
    return [tf.Variable(tf.constant(values, dtype)) for _ in range(2)]


def lookup_and_gradient(table, ids, combiner, upstream):
    with tf.GradientTape() as tape:
        out = sok.lookup_sparse(table, ids, combiners=combiner)
        loss = tf.reduce_sum(out * tf.cast(upstream, out.dtype))
    return out, tape.gradient(loss, table)


def graph_ops(fn, *specs):
    return tf.function(fn).get_concrete_function(*specs).graph.get_operations()


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.bfloat16, tf.float16])
@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("compiled", [False, True])
def test_equals_the_deduplicated_lookup_bit_for_bit(dtype, combiner, compiled):
    rng = np.random.default_rng(7)
    # Repeated ids (Zipf-like), so that the gradient has rows to sum.
    ids = np.minimum(rng.zipf(1.3, [BATCH, 1]) - 1, ROWS - 1).astype(np.int64)
    upstream = rng.standard_normal([BATCH, DIM])
    one_id, deduplicated = twin_tables(dtype)
    run = tf.function(lookup_and_gradient) if compiled else lookup_and_gradient
    out, grad = run(one_id, tf.constant(ids), combiner, upstream)
    ref_out, ref_grad = run(
        deduplicated, tf.RaggedTensor.from_tensor(tf.constant(ids)), combiner, upstream
    )
    np.testing.assert_array_equal(out.numpy(), ref_out.numpy())
    assert isinstance(grad, tf.IndexedSlices)
    np.testing.assert_array_equal(grad.indices.numpy(), ref_grad.indices.numpy())
    np.testing.assert_array_equal(grad.values.numpy(), ref_grad.values.numpy())
    assert len(np.unique(grad.indices.numpy())) == len(grad.indices.numpy())  # deduplicated
    np.testing.assert_array_equal(grad.dense_shape.numpy(), [ROWS, DIM])


def test_plain_resource_variable_and_int32_ids():
    rng = np.random.default_rng(1)
    ids = rng.integers(0, ROWS, [BATCH, 1]).astype(np.int32)
    upstream = rng.standard_normal([BATCH, DIM])
    one_id, deduplicated = twin_tables(tf.float32, kind="tf")
    out, grad = lookup_and_gradient(one_id, tf.constant(ids), "sum", upstream)
    ref_out, ref_grad = lookup_and_gradient(
        deduplicated, tf.RaggedTensor.from_tensor(tf.constant(ids)), "sum", upstream
    )
    np.testing.assert_array_equal(out.numpy(), ref_out.numpy())
    np.testing.assert_array_equal(grad.indices.numpy(), ref_grad.indices.numpy())
    np.testing.assert_array_equal(grad.values.numpy(), ref_grad.values.numpy())


def test_the_graph_reads_rows_per_sample_only_for_one_id_dense_ids():
    table = twin_tables(tf.float32)[0]
    spec = tf.TensorSpec([None, 1], tf.int64)
    ops = graph_ops(lambda x: lookup_and_gradient(table, x, "mean", 1.0), spec)
    types = [op.type for op in ops]
    gathers = [op for op in ops if op.type == "SokLiteGatherRows"]
    assert len(gathers) == 1 and gathers[0].get_attr("per_sample")
    assert "SokLiteSegmentCombine" not in types
    # The gradient still deduplicates: unique ids, then one summed row per id.
    assert "SokLiteUniqueIds" in types and "SokLiteSegmentCombineGrad" in types
    # Two ids a sample, or weights, take the deduplicated lookup.
    wide = graph_ops(lambda x: sok.lookup_sparse(table, x), tf.TensorSpec([None, 2], tf.int64))
    weighted = graph_ops(
        lambda x, w: sok.lookup_sparse(table, x, sp_weights=w),
        spec,
        tf.TensorSpec([None, 1], tf.float32),
    )
    for graph in (wide, weighted):
        assert "SokLiteSegmentCombine" in [op.type for op in graph]
        assert not any(op.get_attr("per_sample") for op in graph if op.type == "SokLiteGatherRows")


@pytest.mark.parametrize("bad", [ROWS, -1])
def test_an_id_out_of_range_names_the_table_and_the_sample(bad):
    table = twin_tables(tf.float32)[0]
    ids = tf.constant([[3], [bad], [4]], tf.int64)
    expected = f"table 0 ('t0'): id {bad} of sample 1 is out of range [0, {ROWS})"
    with pytest.raises(tf.errors.InvalidArgumentError) as eager:
        sok.lookup_sparse(table, ids)
    assert expected in eager.value.message
    with pytest.raises(tf.errors.InvalidArgumentError) as compiled:
        tf.function(lambda x: sok.lookup_sparse(table, x))(ids)
    assert expected in compiled.value.message


@pytest.mark.parametrize("compiled", [False, True])
def test_a_bad_id_stores_no_key_in_a_hash_table_of_the_same_call(compiled):
    table = twin_tables(tf.float32)[0]
    hashed = sok.DynamicVariable(DIM, name="h")

    def lookup(ids, keys):
        return sok.lookup_sparse([table, hashed], [ids, keys])

    run = tf.function(lookup) if compiled else lookup
    keys = tf.ragged.constant([[11], [12, 13], [14]], tf.int64)
    with pytest.raises(tf.errors.InvalidArgumentError, match="id 40 of sample 2"):
        run(tf.constant([[1], [2], [ROWS]], tf.int64), keys)
    assert int(hashed.size()) == 0
    run(tf.constant([[1], [2], [3]], tf.int64), keys)
    assert int(hashed.size()) == 4


def test_empty_batch():
    table = twin_tables(tf.float32)[0]
    out, grad = lookup_and_gradient(table, tf.zeros([0, 1], tf.int64), "sum", 1.0)
    assert out.shape == (0, DIM)
    assert grad.values.shape == (0, DIM) and grad.indices.shape == (0,)


def test_keras_layer_feeds_one_id_dense_inputs_per_sample():
    """EmbeddingCollection passes dense one-id inputs as they are (no pad_value): the same
    outputs and gradients as the same ids fed ragged."""
    rng = np.random.default_rng(5)
    ids = rng.integers(0, ROWS, [BATCH, 1]).astype(np.int64)
    upstream = tf.constant(rng.standard_normal([BATCH, DIM]), tf.float32)
    specs = [sok.keras.FeatureSpec("f", ROWS, DIM)]
    layers = [sok.keras.EmbeddingCollection(specs, name=f"c{i}") for i in range(2)]
    for layer in layers:
        layer.build({"f": tf.TensorShape([None, 1])})
    layers[1].tables["f"].assign(layers[0].tables["f"])
    results = []
    for layer, x in zip(layers, [tf.constant(ids), tf.RaggedTensor.from_tensor(ids)]):
        with tf.GradientTape() as tape:
            out = layer({"f": x})["f"]
            loss = tf.reduce_sum(out * upstream)
        results.append((out, tape.gradient(loss, layer.tables["f"])))
    (out, grad), (ref_out, ref_grad) = results
    np.testing.assert_array_equal(out.numpy(), ref_out.numpy())
    np.testing.assert_array_equal(grad.indices.numpy(), ref_grad.indices.numpy())
    np.testing.assert_array_equal(grad.values.numpy(), ref_grad.values.numpy())
    spec = tf.TensorSpec([None, 1], tf.int64)
    ops = graph_ops(lambda x: layers[0]({"f": x}), spec)
    assert any(op.type == "SokLiteGatherRows" and op.get_attr("per_sample") for op in ops)
