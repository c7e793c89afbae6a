"""Regressions: sok_lite's optimizer wrappers in dump/load/opt_slots, dumping the state Keras
keeps for tables it applied itself, and tables whose local shard is empty."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok


def _grad(rows, dim, value=1.0, table_rows=None):
    rows = tf.constant(rows, tf.int64)
    shape = None if table_rows is None else tf.constant([table_rows, dim], tf.int64)
    return tf.IndexedSlices(tf.fill([len(rows), dim], value), rows, shape)


# --- 1. our wrappers are accepted wherever an optimizer is -------------------------------

WRAPPERS = {
    "OptimizerWrapper": lambda: sok.OptimizerWrapper(keras.optimizers.Adam(0.1)),
    "keras.OptimizerWrapper": lambda: sok.keras.OptimizerWrapper(keras.optimizers.Adam(0.1)),
    "optimizers.Adam": lambda: sok.optimizers.Adam(0.1),
    "wrapped twice": lambda: sok.keras.OptimizerWrapper(
        sok.OptimizerWrapper(keras.optimizers.Adam(0.1))
    ),
}


@pytest.mark.parametrize("make", WRAPPERS.values(), ids=WRAPPERS.keys())
def test_wrapped_optimizer_in_dump_load_and_opt_slots(make, tmp_path):
    table = sok.Variable(np.ones([4, 2]), dtype=tf.float32)
    opt = make()
    for _ in range(2):
        opt.apply_gradients([(_grad([1, 3], 2), table)])
    slots = sok.opt_slots(opt, table)
    assert sorted(slots) == ["m", "v"] and np.count_nonzero(slots["m"].numpy()) == 4
    sok.dump(tmp_path / "c", [table], opt)
    sok.dump(tmp_path / "inc", [table], opt, since_step=1)

    fresh, fresh_opt = sok.Variable(np.zeros([4, 2]), dtype=tf.float32), make()
    sok.load([tmp_path / "c", tmp_path / "inc"], [fresh], fresh_opt)
    np.testing.assert_array_equal(fresh.numpy(), table.numpy())
    assert int(fresh_opt.iterations) == 2
    loaded = sok.opt_slots(fresh_opt, fresh)
    for name in ("m", "v"):
        np.testing.assert_array_equal(loaded[name].numpy(), slots[name].numpy())
    # The same state is what a plain Keras optimizer loads.
    plain = keras.optimizers.Adam(0.1)
    sok.load(tmp_path / "c", [fresh], plain)
    np.testing.assert_array_equal(sok.opt_slots(plain, fresh)["v"].numpy(), slots["v"].numpy())


# --- 2. a table applied by Keras itself: dump what Keras holds ---------------------------

KERAS_APPLIED = {
    "momentum": (lambda: keras.optimizers.SGD(1.0, momentum=0.9), ["momentums"]),
    "adam": (lambda: keras.optimizers.Adam(0.1), ["_momentums", "_velocities"]),
}


@pytest.mark.parametrize("make,attrs", KERAS_APPLIED.values(), ids=KERAS_APPLIED.keys())
def test_dump_saves_the_slots_keras_holds(make, attrs, tmp_path):
    table = sok.Variable(np.zeros([3, 2]), dtype=tf.float32)
    opt = make()
    for _ in range(2):  # no OptimizerScope: Keras updates the table and its own slots
        opt.apply_gradients([(_grad([0, 2], 2, table_rows=3), table)])
    index = opt._get_variable_index(table)
    held = [getattr(opt, a)[index].numpy() for a in attrs]
    assert np.count_nonzero(held[0]) == 4  # Keras' momentum rows are not zero
    sok.dump(tmp_path / "c", [table], opt)

    fresh, fresh_opt = sok.Variable(np.zeros([3, 2]), dtype=tf.float32), make()
    sok.load(tmp_path / "c", [fresh], fresh_opt)
    np.testing.assert_array_equal(fresh.numpy(), table.numpy())
    for got, want in zip(sok.opt_slots(fresh_opt, fresh).values(), held):
        np.testing.assert_array_equal(got.numpy(), want)

    # A fresh optimizer that Keras built with the table gets Keras' slots restored as well,
    # so that training on outside OptimizerScope continues from the saved state.
    built_opt = make()
    built_opt.build([fresh])
    sok.load(tmp_path / "c", [fresh], built_opt)
    index = built_opt._get_variable_index(fresh)
    for attr, want in zip(attrs, held):
        np.testing.assert_array_equal(getattr(built_opt, attr)[index].numpy(), want)
    for _ in range(2):
        opt.apply_gradients([(_grad([0, 1], 2, table_rows=3), table)])
        built_opt.apply_gradients([(_grad([0, 1], 2, table_rows=3), fresh)])
    np.testing.assert_allclose(fresh.numpy(), table.numpy(), rtol=1e-6)


def test_incremental_dump_of_a_keras_applied_table_is_refused(tmp_path):
    table = sok.Variable(np.zeros([3, 2]), dtype=tf.float32)
    opt = keras.optimizers.SGD(1.0, momentum=0.9)
    opt.apply_gradients([(_grad([0], 2, table_rows=3), table)])
    with pytest.raises(ValueError, match="full dump"):
        sok.dump(tmp_path / "inc", [table], opt, since_step=0)


def test_keras_apply_under_scope_uses_the_row_wise_slots(tmp_path):
    # opt.apply(grads, variables), Keras 3's other entry point, is routed like apply_gradients.
    table = sok.Variable(np.zeros([3, 2]), dtype=tf.float32)
    opt = keras.optimizers.SGD(1.0, momentum=0.9)
    with sok.OptimizerScope([table]):
        opt.apply([_grad([1], 2)], [table])
    np.testing.assert_array_equal(sok.opt_slots(opt, table)["m"].numpy()[1], [-1.0, -1.0])


# --- 3. a rank holding no rows of a table takes part in every step -----------------------

ALL_KINDS = {
    "sgd": lambda: keras.optimizers.SGD(0.1),
    "momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
    "nesterov": lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: keras.optimizers.Adam(0.1),
    "amsgrad": lambda: keras.optimizers.Adam(0.1, amsgrad=True),
    "adamw": lambda: keras.optimizers.AdamW(0.1),
    "adagrad": lambda: keras.optimizers.Adagrad(0.1),
    "rmsprop": lambda: keras.optimizers.RMSprop(0.1),
    "rmsprop-centered": lambda: keras.optimizers.RMSprop(0.1, momentum=0.5, centered=True),
    "ftrl": lambda: keras.optimizers.Ftrl(0.1),
}


@pytest.mark.parametrize("entry", ["apply_gradients", "apply"])
@pytest.mark.parametrize("make", ALL_KINDS.values(), ids=ALL_KINDS.keys())
def test_empty_shard_steps_under_scope(make, entry, tmp_path):
    # One rank's view of a table it holds no rows of (e.g. rank 0 of a "localized:1" table).
    empty = sok.Variable(np.zeros([0, 128]), dtype=tf.float32)
    table = sok.Variable(np.ones([4, 128]), dtype=tf.float32)
    dense = tf.Variable(tf.ones([2]))
    opt = make()
    pairs = [(_grad([], 128), empty), (_grad([2], 128), table), (tf.ones([2]), dense)]

    @tf.function
    def step():
        with sok.OptimizerScope([empty, table, dense]):
            if entry == "apply":
                opt.apply([g for g, _ in pairs], [v for _, v in pairs])
            else:
                opt.apply_gradients(pairs)

    for _ in range(2):
        step()
    assert int(opt.iterations) == 2
    assert empty.shape == (0, 128)
    assert not np.array_equal(table.numpy()[2], np.ones(128))
    sok.dump(tmp_path / "c", [empty, table], opt)
    sok.load(tmp_path / "c", [empty, table], opt)
