"""What the tf.distribute workers share: the strategy of a run kind and the tables' shards."""

import numpy as np
import tensorflow as tf

import sok_lite as sok
from sok_lite.comm.shards import ReplicaShards

KINDS = ("single", "mirrored", "multi_worker")


def make_strategy(kind: str, replicas: int = 2):
    """None for "single"; MirroredStrategy over `replicas` logical CPUs; or
    MultiWorkerMirroredStrategy from TF_CONFIG. Call before TensorFlow runs any op."""
    if kind == "single":
        return None
    if kind == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        logical = [tf.config.LogicalDeviceConfiguration()] * replicas
        tf.config.set_logical_device_configuration(cpu, logical)
        devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)
    if kind == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError(f"unknown run kind {kind!r}, expected one of {KINDS}")


def shard_arrays(tables: dict) -> dict:
    """{"<table>@<rank>": this process's rows of the table on that rank}."""
    arrays = {}
    for name, table in tables.items():
        if isinstance(table, ReplicaShards):
            pairs = zip(table.ranks, table.shards)
        else:
            pairs = [(sok.rank(), table)]
        for rank, shard in pairs:
            arrays[f"{name}@{rank}"] = np.asarray(shard.numpy())
    return arrays
