"""The combine's gradient (one summed row per unique id) against a NumPy scatter-add in float64:
hot ids (Zipf), weights, every combiner, empty samples and unique rows that no id refers to.

On the CPU each row sums its ids in ascending position, as np.add.at does, however the rows are
split between threads: the result is bit for bit NumPy's. The GPU sums with atomics, in any
order, and is held to a tolerance.
"""

import numpy as np
import pytest
import tensorflow as tf

from sok_lite.ops import lookup_ops

pytestmark = pytest.mark.usefixtures("device")


def _scales(splits, weights, combiner):
    """scale[b] as the kernels compute it: the denominator summed in position order."""
    scales = np.ones(len(splits) - 1)
    if combiner == "sum":
        return scales
    for b in range(len(splits) - 1):
        denom = 0.0
        for k in range(splits[b], splits[b + 1]):
            w = 1.0 if weights is None else weights[k]
            denom += w if combiner == "mean" else w * w
        if combiner == "sqrtn":
            denom = np.sqrt(denom)
        scales[b] = 0.0 if denom == 0 else 1.0 / denom
    return scales


def _reference(grads, inverse, splits, weights, combiner, num_unique):
    sample = np.repeat(np.arange(len(splits) - 1), np.diff(splits))
    factor = _scales(splits, weights, combiner)[sample]
    if weights is not None:
        factor = weights * factor
    out = np.zeros([num_unique, grads.shape[1]])
    np.add.at(out, inverse, factor[:, None] * grads[sample])
    return out


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
@pytest.mark.parametrize("weighted", [False, True])
def test_matches_numpy_scatter_add(device, combiner, weighted):
    rng = np.random.default_rng(7)
    batch, dim = 3_000, 24
    lengths = rng.integers(0, 12, batch)  # empty samples included
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n = int(splits[-1])
    ids = rng.zipf(1.3, n) % 2_000  # a few ids carry most positions
    _, inverse = np.unique(ids, return_inverse=True)
    num_unique = int(inverse.max()) + 3  # the last two rows are referred to by no id: zeros
    weights = rng.uniform(-1.0, 2.0, n) if weighted else None
    grads = rng.standard_normal([batch, dim])

    got = lookup_ops.segment_combine_grad(
        [tf.constant(grads)],
        [tf.constant(inverse, tf.int32)],
        [tf.constant(splits)],
        [tf.constant(weights if weighted else np.zeros([0]))],
        [tf.constant(num_unique, tf.int64)],
        [combiner],
    )[0].numpy()

    want = _reference(grads, inverse, splits, weights, combiner, num_unique)
    if "CPU" in device:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert not got[-2:].any()


def test_tables_of_one_call_match_numpy(device):
    """Many tables in one op, small and large, of different widths and combiners: the small
    ones run side by side, the large one split in row ranges."""
    rng = np.random.default_rng(11)
    specs = [(4_096, 1, 16, "sum"), (2_000, 3, 8, "mean"), (40_000, 10, 64, "sqrtn")]
    specs += [(500 + 300 * t, 1 + t % 4, 4 + t, "sum") for t in range(8)]
    args, wants = [[], [], [], [], []], []
    for batch, hot, dim, combiner in specs:
        lengths = rng.integers(0, hot + 1, batch)
        splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        ids = rng.zipf(1.2, int(splits[-1])) % 5_000
        _, inverse = np.unique(ids, return_inverse=True)
        num_unique = int(inverse.max(initial=-1)) + 1
        weights = rng.uniform(0.5, 1.5, len(ids))
        grads = rng.standard_normal([batch, dim])
        values = [grads, inverse.astype(np.int32), splits, weights, np.int64(num_unique)]
        for a, v in zip(args, values):
            a.append(tf.constant(v))
        wants.append(_reference(grads, inverse, splits, weights, combiner, num_unique))

    got = lookup_ops.segment_combine_grad(*args, [s[3] for s in specs])

    for g, want in zip(got, wants):
        if "CPU" in device:
            np.testing.assert_array_equal(g.numpy(), want)
        else:
            np.testing.assert_allclose(g.numpy(), want, rtol=1e-12, atol=1e-12)
