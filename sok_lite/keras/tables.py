"""The tables behind the Keras layers: created from a TableSpec, kept in Keras weight files,
counted for summary(), refused by Keras optimizers that are not wrapped.

A fixed-size table is a sok_lite.Variable; a hash table (input_dim None) a
sok_lite.DynamicVariable. Keras saves a weight as one dense array, which a hash table does not
have: its state is the keys it stores and their rows, optimizer slots included, saved as two
arrays.
"""

import dataclasses
import math

import numpy as np
import tensorflow as tf

from sok_lite._errors import table_label
from sok_lite.comm.shards import shards_of
from sok_lite.compat.sok2_dynamic import DynamicVariable
from sok_lite.keras._keras_hooks import check_slots_with, count_weights_with
from sok_lite.ops import hash_table_ops
from sok_lite.tables import TableSpec


def create_table(spec: TableSpec, name: str, dtype, trainable: bool):
    """The table of `spec` (TableSpec.build), named `name` and stored in `dtype`."""
    if spec.kind == "hash":
        # Keras meets hash tables from now on: count them, and refuse its own slots for them.
        count_weights_with(hash_table_values)
        check_slots_with(refuse_keras_slots)
    return dataclasses.replace(spec, name=name, dtype=dtype).build(trainable)


def _keys_entry(key: str) -> str:
    return f"{key}_keys"


def save_weight(store, key: str, weight) -> None:
    """Puts `weight` in a Keras weight store under `key`: a hash table as its rows (values,
    then optimizer slots) under `key` and its keys under `key`_keys."""
    if isinstance(weight, DynamicVariable):
        keys, rows = weight.export(with_slots=True)
        store[_keys_entry(key)] = keys.numpy().astype(np.int64)
        store[key] = rows.numpy()
    else:
        store[key] = weight.numpy()


def check_weight(store, key: str, weight, label: str) -> None:
    """Raises ValueError, naming the weight, unless what save_weight put under `key` fits
    `weight`: a layer checks every weight before it loads any."""
    if key not in store:
        raise ValueError(f"{label}: the weights file has no entry {key!r}")
    shape = tuple(np.shape(store[key]))
    if isinstance(weight, DynamicVariable):
        if _keys_entry(key) not in store:
            raise ValueError(
                f"{label}: weight {key} is a hash table but the weights file has no keys for it"
            )
        dim, keys = weight.dimension, tuple(np.shape(store[_keys_entry(key)]))
        if len(shape) != 2 or shape[1] % dim or len(keys) != 1 or keys[0] != shape[0]:
            raise ValueError(
                f"{label}: weight {key} ('{weight.name}', a hash table of dimension {dim}) gets "
                f"{keys[0] if keys else '?'} keys and rows of shape {shape}: it needs as many "
                f"rows as keys, of {dim} columns per array (value, then optimizer slots)"
            )
    elif shape != tuple(weight.shape):
        raise ValueError(
            f"{label}: weight {key} ('{weight.name}') has shape {tuple(weight.shape)}, the "
            f"weights file holds {shape}"
        )


def load_weight(store, key: str, weight, label: str) -> None:
    """Sets `weight` from what save_weight put under `key` (check_weight came first); a hash
    table keeps exactly the saved keys."""
    check_weight(store, key, weight, label)
    if isinstance(weight, DynamicVariable):
        keys = tf.constant(np.asarray(store[_keys_entry(key)]), tf.int64)
        weight.replace_rows(keys, tf.constant(np.asarray(store[key]), tf.float32))
    else:
        weight.assign(store[key])


def stored_values(weight) -> int:
    """The number of values a weight holds: a hash table's rows stored on this process times
    its dimension (this rank's count: summary() often runs on one rank only, so the count
    must not wait for the others), any other weight the product of its shape."""
    if not _is_hash_table(weight):
        return math.prod(weight.shape)
    shards = shards_of(weight)  # one per local replica under MirroredStrategy
    rows = sum(int(hash_table_ops.size(shard.handle)) for shard in shards)
    return rows * int(shards[0].shape[1])


def hash_table_values(weight) -> int | None:
    """A hash table's values as Keras' weight counts (summary(), count_params()) take them:
    the rows stored on this process times its dimension (see stored_values); None for any
    other weight, which Keras counts by its shape."""
    return stored_values(weight) if _is_hash_table(weight) else None


def refuse_keras_slots(optimizer, variable, slot: str | None) -> None:
    """Refuses a Keras optimizer's own slot for a hash table, which has no fixed shape to give
    it: the wrapped optimizer keeps its slots beside the table's rows instead."""
    if not _is_hash_table(variable):
        return
    raise ValueError(
        f"optimizer {optimizer.name!r} ({type(optimizer).__name__}) cannot make its "
        f"{slot or 'slot'!r} variable for '{table_label(variable)}', a hash table "
        "(sok_lite.DynamicVariable) whose rows come and go with the keys: a plain Keras "
        "optimizer cannot train it. Wrap the optimizer, "
        "model.compile(optimizer=sok.OptimizerWrapper(optimizer)), or apply its gradients "
        "inside sok.OptimizerScope"
    )


def hash_table_names(weights) -> list[str]:
    """The names of the hash tables among `weights`."""
    return [table_label(w) for w in weights if _is_hash_table(w)]


def _is_hash_table(weight) -> bool:
    return isinstance(shards_of(weight)[0], DynamicVariable)
