"""The fields of a table's memory_stats(), shared by both table kinds and memory_report."""

# In the order of SokLiteDynamicMemoryStats' output.
MEMORY_STATS = (
    "rows_ram",
    "rows_disk",
    "bytes_ram",
    "bytes_disk",
    "ram_budget",
    "hits",
    "misses",
    "spills",
    "evictions",
)


def ram_only(rows: int, bytes_ram: int) -> dict:
    """memory_stats() of a table held wholly in RAM that keeps no lookup counters."""
    stats = dict.fromkeys(MEMORY_STATS, 0)
    stats.update(rows_ram=rows, bytes_ram=bytes_ram, ram_budget=None)
    return stats
