"""Memory of sok_lite tables: the layouts (layouts), what they will take before they exist
(plan_memory) and what they take now (memory_report)."""

from sok_lite.memory.layouts import (
    OPTIMIZER_SLOTS,
    hash_index_slots,
    hash_stride,
    hash_table_bytes,
    num_slots,
    static_table_bytes,
    tier_budget_for,
    tier_index_bytes,
    tier_ram_rows,
    tier_record_bytes,
)
from sok_lite.memory.plan import MemoryPlan, plan_memory
from sok_lite.memory.report import MemoryReport, memory_report, table_memory
from sok_lite.tables import TableSpec
from sok_lite.tables.storage import parse_bytes

__all__ = [
    "MemoryPlan",
    "MemoryReport",
    "TableSpec",
    "memory_report",
    "plan_memory",
    "table_memory",
    "OPTIMIZER_SLOTS",
    "hash_index_slots",
    "hash_stride",
    "hash_table_bytes",
    "num_slots",
    "parse_bytes",
    "static_table_bytes",
    "tier_budget_for",
    "tier_index_bytes",
    "tier_ram_rows",
    "tier_record_bytes",
]
