"""sok_lite.prefetch: reads the rows of a coming batch that a disk tier holds back into RAM
while the current batch trains, so that the coming lookup finds them there.

A prefetch only moves rows between a tiered table's file and its RAM (bit for bit), so results
never change, with or without it. See docs/user_guide.md, "Tables larger than memory".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

import tensorflow as tf

from sok_lite import comm
from sok_lite.comm.shards import ReplicaShards
from sok_lite.ops import hash_table_ops
from sok_lite.tables.dynamic import DynamicTable
from sok_lite.tables.table_kind import TableKind

Ids: TypeAlias = tf.Tensor | tf.RaggedTensor | tf.SparseTensor


def prefetch(
    tables: object | Sequence[object],
    ids: Ids | Sequence[Ids],
    *,
    wait_for_lookup: bool = True,
) -> tf.Tensor:
    """Reads the rows of `ids` that tiered tables hold on disk back into RAM, ahead of a lookup.

    Call it with the next batch's ids while the current batch trains (sok_lite.keras.
    prefetch_rows does so for `model.fit`). The rows read back count against the table's
    ram_budget, and stay in RAM until the lookup they were read for: only when no other row can
    make room does a spill take them. A prefetch never takes the room the current batch needs;
    it reads back what fits beside it.

    Args:
      tables: a table or a list of them: sok_lite.DynamicVariable with a sok.storage.Disk; any
        other table (in RAM, static, or on a GPU) is skipped. A table may repeat (features that
        share it): its ids are taken together.
      ids: per table, its ids as lookup_sparse takes them (a tf.RaggedTensor, tf.SparseTensor
        or dense integer tensor of any shape); every entry counts as a key.
      wait_for_lookup: wait (at most a second) until each table has had a lookup since its
        previous prefetch, so that a prefetch running one batch ahead, in an input pipeline,
        follows the current batch's lookup rather than delaying it. False: read at once.

    Returns:
      An int64 scalar: the rows read back from disk by this process (on every rank, each
      reads the keys of its ids that it holds; with N ranks that is about 1/N of the rows the
      next lookup reads there).

    Raises:
      ValueError: for a tables/ids length mismatch, or a table that is not a sok_lite table.

    A failure of the disk tier (a corrupted record, a full disk) moves nothing and is not
    raised here: the lookup that needs the row raises it.
    """
    tables_list = list(tables) if isinstance(tables, (list, tuple)) else [tables]
    ids_list = list(ids) if isinstance(ids, (list, tuple)) else [ids]
    if len(tables_list) != len(ids_list):
        raise ValueError(f"prefetch got {len(tables_list)} tables and {len(ids_list)} id lists")
    keys_by_table: dict[int, tuple[object, list[tf.Tensor]]] = {}
    for table, x in zip(tables_list, ids_list):
        _check_table(table)
        keys_by_table.setdefault(id(table), (table, []))[1].append(_keys(x))
    communicator = comm.current()
    read = [tf.constant(0, tf.int64)]
    for table, keys in keys_by_table.values():
        joined = keys[0] if len(keys) == 1 else tf.concat(keys, 0)
        for shard, rank in _shards(table, communicator):
            if not (isinstance(shard, DynamicTable) and shard.storage is not None):
                continue
            read.append(
                hash_table_ops.prefetch(
                    shard.handle,
                    joined,
                    owner=shard.owner_code,
                    rank=rank,
                    num_ranks=communicator.num_ranks,
                    wait_for_lookup=wait_for_lookup,
                    table_name=f"table '{shard._label}'",
                )
            )
    return tf.add_n(read)


def _check_table(table: object) -> None:
    shards = table.shards if isinstance(table, ReplicaShards) else (table,)
    if not all(isinstance(s, TableKind) for s in shards):
        raise ValueError(f"prefetch takes sok_lite tables, got {type(table).__name__}")


def _keys(ids: Ids) -> tf.Tensor:
    """Every id of a feature as a flat int64 tensor."""
    if isinstance(ids, tf.RaggedTensor):
        values = ids.flat_values
    elif isinstance(ids, tf.SparseTensor):
        values = ids.values
    else:
        values = tf.reshape(tf.convert_to_tensor(ids), [-1])
    if not values.dtype.is_integer:
        raise ValueError(f"prefetch takes integer ids, got {values.dtype.name}")
    return tf.cast(values, tf.int64)


def _shards(table: object, communicator: comm.Communicator) -> list[tuple[object, int]]:
    """(table, rank) of each shard this process holds."""
    if isinstance(table, ReplicaShards):
        return list(zip(table.shards, table.ranks))
    return [(table, communicator.rank)]
