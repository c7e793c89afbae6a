"""memory_report: how much memory sok_lite tables take on this rank, from each table's own
memory_stats() (a hash table counts its records, indexes and tiers in C++)."""

from __future__ import annotations

import numpy as np

from sok_lite import comm
from sok_lite._errors import table_label
from sok_lite.memory.layouts import MemoryEntry, format_entries, human_bytes, num_slots
from sok_lite.optim.slots import opt_slots, stepped_row_wise
from sok_lite.tables.dynamic import DynamicTable
from sok_lite.tables.table_kind import MEMORY_STATS, Optimizer, TableKind


def _static_slot_bytes(table: TableKind, optimizer: Optimizer | None) -> tuple[int, int]:
    """(slots, bytes) of the optimizer state held beside static table `table`."""
    if optimizer is None:
        return 0, 0
    held = list(opt_slots(optimizer, table).values())
    total = sum(int(np.prod(s.shape)) * s.dtype.size for s in held)
    if stepped_row_wise(optimizer, table):
        total += int(table.shape[0]) * 8  # the step that last changed each row
    return len(held), total


def table_memory(table: TableKind, optimizer: Optimizer | None = None) -> MemoryEntry:
    """One row of memory_report for `table` on this rank (see memory_report)."""
    hashed = isinstance(table, DynamicTable)
    if not callable(getattr(table, "memory_stats", None)):
        raise ValueError(
            f"'{table_label(table)}' ({type(table).__name__}) is not a sok_lite table: "
            "memory_report takes sok.Variable and sok.DynamicVariable objects"
        )
    stats: MemoryEntry = dict(table.memory_stats())
    missing = [k for k in MEMORY_STATS if k not in stats]
    if missing:
        raise ValueError(f"'{table_label(table)}': memory_stats() lacks {missing}")
    slots = 0
    if hashed:
        # Slots live in the hash table's records: counted by the table (or the estimate).
        slots = num_slots(optimizer) if optimizer is not None else 0
    else:
        slots, slot_bytes = _static_slot_bytes(table, optimizer)
        stats["bytes_ram"] += slot_bytes
    looked_up = stats["hits"] + stats["misses"]
    if looked_up:
        hit_rate = stats["hits"] / looked_up
    elif stats["ram_budget"] is None and stats["rows_disk"] == 0:
        hit_rate = 1.0  # no disk tier: every row is in RAM
    else:
        hit_rate = None
    return {
        "name": table_label(table),
        "kind": "hash" if hashed else "static",
        "rank": comm.current().rank,
        **{k: (None if stats[k] is None else int(stats[k])) for k in MEMORY_STATS},
        "hit_rate": hit_rate,
        "slots": slots,
    }


class MemoryReport(list[MemoryEntry]):
    """memory_report's result: one dict per table, and a readable str()."""

    @property
    def bytes_ram(self) -> int:
        return sum(e["bytes_ram"] for e in self)

    @property
    def bytes_disk(self) -> int:
        return sum(e["bytes_disk"] for e in self)

    def __str__(self) -> str:
        return (
            f"{format_entries(self, with_rank=False)}\n"
            f"total: {human_bytes(self.bytes_ram)} in RAM, {human_bytes(self.bytes_disk)} on disk"
        )


def memory_report(
    tables: TableKind | list[TableKind] | tuple[TableKind, ...],
    optimizer: Optimizer | None = None,
) -> MemoryReport:
    """What `tables` hold on this rank: rows and bytes in RAM and on disk, values and optimizer
    slots together, with the RAM tier's hit rate, spills and evictions.

    Each table reports its own rows, bytes and counters (memory_stats()). A static table's
    optimizer slots
    are the slot variables `optimizer` keeps for it; a hash table's live in its records.

    Args:
      tables: sok.Variable / sok.DynamicVariable objects (or one).
      optimizer: the optimizer training them (a Keras optimizer or a sok_lite wrapper), or
        None to count the tables' own rows only.

    Returns:
      A MemoryReport: a list of dicts, one per table, with the keys name, kind ("static" or
      "hash"), rank, rows_ram, rows_disk, bytes_ram, bytes_disk, ram_budget (None: unbounded),
      hits, misses, spills, evictions, hit_rate (hits / (hits + misses): the share of
      looked-up ids found in RAM; 1.0 for a table without a disk tier before it counts any;
      None before any lookup of a tiered table), slots (per row) and source
      ("measured" or "estimated"). str() of it is a table.

    Raises:
      ValueError: naming the object, for one that is not a sok_lite table (a tf.Variable, ...)
        or a table whose memory_stats() lacks one of the keys.

    >>> import numpy as np, sok_lite as sok
    >>> report = sok.memory_report([sok.Variable(np.zeros([10, 4]), name="tiny")])
    >>> report[0]["rows_ram"], report[0]["bytes_ram"]
    (10, 160)
    """
    listed = tables if isinstance(tables, (list, tuple)) else [tables]
    return MemoryReport(table_memory(t, optimizer) for t in listed)
