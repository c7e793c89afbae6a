"""The state a failed call must leave alone: a table of each kind, trained a few steps with a
Keras optimizer, a complete checkpoint of it, and a snapshot of everything (rows, slots,
counters, the optimizer's step, the files under the world's directory)."""

import dataclasses
import hashlib
import os
import pathlib

import keras
import numpy as np
import tensorflow as tf

import sok_lite as sok

# Every kind of table a failure case runs on (2 ranks: tests/distributed/workers).
KINDS = ("static", "localized", "half_static", "hash", "tiered", "half")
KEYED = ("hash", "tiered", "half")
ROWS, DIM = 40, 4


@dataclasses.dataclass
class World:
    kind: str
    table: object
    optimizer: object
    root: pathlib.Path  # the user's directory: files here are compared too
    checkpoint: pathlib.Path  # a complete sok.dump of the table, one step behind it

    @property
    def keyed(self) -> bool:
        return self.kind in KEYED


def make_table(kind: str, root: pathlib.Path, name: str = "t", dim: int = DIM):
    init = keras.initializers.RandomNormal(seed=7)
    if kind == "static":
        return sok.Variable(shape=[ROWS, dim], initializer=init, name=name)
    if kind == "localized":
        return sok.Variable(shape=[ROWS, dim], initializer=init, mode="localized:0", name=name)
    if kind == "half_static":
        return sok.Variable(shape=[ROWS, dim], initializer=init, dtype=tf.float16, name=name)
    if kind == "hash":
        return sok.DynamicVariable(dim, initializer=init, name=name)
    if kind == "tiered":
        disk = sok.storage.Disk(root / "tier", ram_budget="64KiB")
        return sok.DynamicVariable(dim, initializer=init, name=name, storage=disk)
    if kind == "half":
        return sok.DynamicVariable(dim, initializer=init, name=name, dtype=tf.bfloat16)
    raise ValueError(kind)


def ids(rows) -> tf.RaggedTensor:
    return tf.ragged.constant(rows, dtype=tf.int64)


def train_step(table, optimizer, step: int) -> None:
    rng = np.random.default_rng(step)
    batch = ids([rng.integers(0, ROWS, size=3).tolist() for _ in range(4)])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(sok.lookup_sparse(table, batch) ** 2)
    grad = tape.gradient(loss, [table])
    with sok.OptimizerScope([table]):
        optimizer.apply_gradients(zip(grad, [table]))


def make_world(kind: str, root: pathlib.Path) -> World:
    table, optimizer = make_table(kind, root), keras.optimizers.Adam(0.05)
    for step in range(2):
        train_step(table, optimizer, step)
    checkpoint = root / "ckpt"
    sok.dump(checkpoint, [table], optimizer)
    train_step(table, optimizer, 2)
    return World(kind, table, optimizer, root, checkpoint)


def table_state(table, optimizer) -> dict:
    """A table's rows with slots (by key for a hash table), counters, and its Keras slots."""
    if isinstance(table, sok.DynamicVariable):
        keys, rows = table.export(with_slots=True)
        order = np.argsort(keys.numpy())
        stats = table.memory_stats()
        return {
            "keys": keys.numpy()[order],
            "rows": rows.numpy()[order],
            "size": int(table.size()),
            **{k: stats[k] for k in ("hits", "misses", "evictions")},
        }
    out = {"value": table.numpy()}
    slots = sok.opt_slots(optimizer, table) if optimizer is not None else {}
    for name, slot in slots.items():
        out[name] = slot.numpy()
    return out


def file_state(root: pathlib.Path) -> dict:
    """Every file and directory under root (a disk tier's cache file aside) with a digest."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = pathlib.Path(dirpath).relative_to(root)
        if rel.parts[:1] == ("tier",):
            out[str(rel)] = "tier"
            continue
        for name in dirnames:
            out[str(rel / name)] = "dir"
        for name in filenames:
            out[str(rel / name)] = hashlib.sha256((pathlib.Path(dirpath) / name).read_bytes())
            out[str(rel / name)] = out[str(rel / name)].hexdigest()
    return out


def snapshot(world: World) -> dict:
    return {
        "table": table_state(world.table, world.optimizer),
        "iterations": int(world.optimizer.iterations.numpy()),
        "files": file_state(world.root),
    }


def assert_unchanged(before: dict, after: dict, label: str) -> None:
    """Bit for bit: NaNs compare equal to NaNs, -0.0 differs from 0.0."""
    assert before.keys() == after.keys(), label
    changed = {
        k: (before["files"].get(k), after["files"].get(k))
        for k in before["files"].keys() | after["files"].keys()
        if before["files"].get(k) != after["files"].get(k)
    }
    assert not changed, f"{label}: files changed {changed}"
    assert before["iterations"] == after["iterations"], f"{label}: optimizer step changed"
    assert before["table"].keys() == after["table"].keys(), f"{label}: slots changed"
    for key, value in before["table"].items():
        a, b = np.asarray(value), np.asarray(after["table"][key])
        assert a.shape == b.shape and a.tobytes() == b.tobytes(), f"{label}: {key} changed"
