"""DynamicVariable against a dict model, driven by random sequences of operations."""

import keras
import numpy as np
import tensorflow as tf
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import sok_lite as sok
from sok_lite.tables.initializers import RowInitializer

DIM, LR = 3, 0.5
# Subnormal floats are excluded: TF flushes them to zero in its threads, NumPy does not.
# Full int64 range: no key value is reserved.
KEYS = [-(2**63), -1, 0, 1, 2**31, 2**63 - 1, 12345, -987654321]
keys_st = st.lists(st.sampled_from(KEYS), min_size=1, max_size=5, unique=True)


class DynamicTableMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.table = sok.DynamicVariable(DIM, initializer=keras.initializers.RandomNormal(seed=3))
        self.init = RowInitializer("random_normal", 0.0, 0.05, seed=3)
        self.model: dict[int, np.ndarray] = {}
        self.last_seen: dict[int, int] = {}
        self.step = 0
        self.opt = keras.optimizers.SGD(LR)

    def initial_row(self, key):
        return self.init(tf.constant([key], tf.int64), DIM, tf.float32).numpy()[0]

    @rule(keys=keys_st)
    def lookup(self, keys):
        self.step += 1
        ids = tf.ragged.constant([[k] for k in keys], dtype=tf.int64)
        out = sok.lookup_sparse(self.table, ids).numpy()
        for k, row in zip(keys, out):
            self.model.setdefault(k, self.initial_row(k))
            self.last_seen[k] = self.step
            np.testing.assert_array_equal(row, self.model[k], err_msg=f"key {k}")

    @rule(keys=keys_st, data=st.data())
    def sgd_update(self, keys, data):
        grads = np.array(
            [
                data.draw(
                    st.lists(
                        st.floats(-2, 2, width=32, allow_subnormal=False),
                        min_size=DIM,
                        max_size=DIM,
                    )
                )
                for _ in keys
            ],
            np.float32,
        )
        with sok.OptimizerScope([self.table]):
            self.opt.apply_gradients(
                [(tf.IndexedSlices(tf.constant(grads), tf.constant(keys, tf.int64)), self.table)]
            )
        for k, g in zip(keys, grads):
            if k in self.model:  # keys without a stored row receive no update
                self.model[k] = self.model[k] - g * np.float32(LR)

    @rule(keys=keys_st, value=st.floats(-3, 3, width=32, allow_subnormal=False))
    def assign(self, keys, value):
        values = np.full([len(keys), DIM], value, np.float32)
        self.table.assign(tf.constant(keys, tf.int64), values)
        for k in keys:
            self.model[k] = values[0].copy()
            self.last_seen.setdefault(k, self.step)

    @rule(steps=st.integers(1, 4))
    def evict(self, steps):
        removed = int(self.table.evict(steps))
        gone = [k for k in self.model if self.step - self.last_seen[k] >= steps]
        for k in gone:
            del self.model[k]
            del self.last_seen[k]
        assert removed == len(gone)

    @invariant()
    def export_matches(self):
        keys, values = self.table.export()
        got = dict(zip(keys.numpy().tolist(), values.numpy()))
        assert sorted(got) == sorted(self.model)
        for k, row in self.model.items():
            np.testing.assert_allclose(got[k], row, rtol=1e-6, err_msg=f"key {k}")
        assert int(self.table.size()) == len(self.model)


TestDynamicTable = DynamicTableMachine.TestCase
TestDynamicTable.settings = settings(
    max_examples=25, stateful_step_count=12, deadline=None, derandomize=True
)
