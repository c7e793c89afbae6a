"""A DynamicVariable with a disk tier against a RAM-only one, driven by random sequences of
lookups, Adam steps, assigns and evictions: both must hold the same rows, bit for bit, after
every operation, however the rows move between RAM and the file."""

import tempfile

import keras
import numpy as np
import tensorflow as tf
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import sok_lite as sok

DIM = 32
# A pool of 80 keys over the whole int64 range; a RAM budget of 12 KiB holds ~11 rows with
# Adam's slots (~25 before the first step) once the disk index of 80 rows (~7 KB) is paid, and
# a lookup needs at most 8: rows move between the tiers in most sequences.
POOL = (np.arange(80, dtype=np.int64) * 0x2545F4914F6CDD1D).tolist()
BUDGET = 12 << 10
keys_st = st.lists(st.sampled_from(POOL), min_size=1, max_size=8, unique=True)


def init():
    return keras.initializers.RandomNormal(seed=11)


class TieredTableMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        disk = sok.storage.Disk(tempfile.mkdtemp(), ram_budget=BUDGET)
        self.tiered = sok.DynamicVariable(DIM, initializer=init(), name="fz", storage=disk)
        self.ram = sok.DynamicVariable(DIM, initializer=init(), name="fz_ram")
        self.opts = {t.name: keras.optimizers.Adam(0.05) for t in (self.tiered, self.ram)}

    def tables(self):
        return (self.tiered, self.ram)

    @rule(keys=keys_st, samples=st.integers(1, 3))
    def lookup(self, keys, samples):
        rows = [keys[i::samples] for i in range(samples)]
        ids = tf.ragged.constant(rows, dtype=tf.int64)
        outs = [sok.lookup_sparse(t, ids).numpy() for t in self.tables()]
        np.testing.assert_array_equal(outs[0], outs[1])

    @rule(keys=keys_st, seed=st.integers(0, 2**16))
    def adam_step(self, keys, seed):
        grads = np.random.default_rng(seed).standard_normal((len(keys), DIM)).astype(np.float32)
        for t in self.tables():
            slices = tf.IndexedSlices(tf.constant(grads), tf.constant(keys, tf.int64))
            with sok.OptimizerScope([t]):
                self.opts[t.name].apply_gradients([(slices, t)])

    @rule(keys=keys_st, value=st.floats(-3, 3, width=32, allow_subnormal=False))
    def assign(self, keys, value):
        values = np.full([len(keys), DIM], value, np.float32)
        for t in self.tables():
            t.assign(tf.constant(keys, tf.int64), values)

    @rule(steps=st.integers(1, 4))
    def evict(self, steps):
        assert int(self.tiered.evict(steps)) == int(self.ram.evict(steps))

    @invariant()
    def same_rows(self):
        exported = []
        for t in self.tables():
            keys, rows = t.export(with_slots=True)
            order = np.argsort(keys.numpy())
            exported.append((keys.numpy()[order], rows.numpy()[order]))
        np.testing.assert_array_equal(exported[0][0], exported[1][0])
        np.testing.assert_array_equal(exported[0][1], exported[1][1])
        stats = self.tiered.memory_stats()
        assert stats["rows_ram"] + stats["rows_disk"] == len(exported[0][0])


TestTieredTable = TieredTableMachine.TestCase
TestTieredTable.settings = settings(
    max_examples=20, stateful_step_count=25, deadline=None, derandomize=True
)
