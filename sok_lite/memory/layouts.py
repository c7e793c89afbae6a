"""Memory layouts of sok_lite tables: bytes per row of each table kind, its optimizer slots
and its disk tier, as the kernels lay them out, and the formatting that plan_memory and
memory_report share. The layouts:

- sok.Variable: this rank's rows in the table's dtype; each optimizer slot a float32 (float64
  for a float64 table) variable of the same rows; once the row-wise kernels step it, one int64
  per row for the step that last changed it (sok_lite/optim/slots.py).
- sok.DynamicVariable (kernels/core/hash_table.cc): per stored row a record of dim x (1 +
  slots) float32 (a 16-bit table packs its value two to a float: (dim + 1) / 2 floats, then the
  float32 slots) in chunks of 1,024 rows, 32 bytes of metadata (key, last lookup, lookup count,
  last update) and a bit of occupancy; the index is a power-of-two array of 16-byte slots kept
  at load <= 0.75. With a disk tier the budget also pays for the index of the rows on disk
  however few rows stay in RAM (tier_index_bytes): up to 2^15 keys 16-32 bytes a key, past that
  ~7.6 bytes a key (kernels/core/disk_index.h keeps 36 bits of a key's hash, not the key).

memory_report reads each table's own memory_stats() (a hash table counts its records, indexes
and tiers in C++).
"""

import math
from collections.abc import Sequence
from typing import Any, TypeAlias

import tensorflow as tf

from sok_lite.optim.optimizer_rules import rule_for, unwrap
from sok_lite.tables.table_dtypes import HALF_DTYPES, row_dtype
from sok_lite.tables.table_kind import Optimizer

# One table's row of a memory report or plan: its values are a str, an int, a float or None by
# key (memory_report and plan_memory document the keys).
MemoryEntry: TypeAlias = dict[str, Any]  # type escape: value types differ by key
# A dtype as the layouts take it: a tf.DType or its name.
DTypeLike: TypeAlias = tf.DType | str

# kernels/core/hash_table.h
HASH_CHUNK_ROWS = 1024
HASH_ROW_META_BYTES = 32
# kernels/core/open_index.h: the key index of a hash table (16-byte entries, 16 at the least)
# and of its disk tier; an insert grows it when it would pass 3/4 full.
HASH_INDEX_SLOT_BYTES = 16
HASH_MIN_INDEX_SLOTS = 16
HASH_MAX_LOAD = (3, 4)
# kernels/core/hash_table_tier_file.*: a record on disk is the bookkeeping and a checksum, then the
# row's floats, padded to 8 bytes; files are cut into segments of ~1 MiB, at most 8,192 records.
TIER_HEADER_BYTES = HASH_ROW_META_BYTES + 8
# kernels/core/disk_index.h: exact (12-byte entries, as the RAM index grows) up to 2^15 keys;
# compact past that: 64-byte buckets of 9 entries, at most keys * 100 / (96 * 9) buckets plus one
# a shard, in 4,096 shards or one per 512 keys, each with a 16-byte header.
TIER_INDEX_ENTRY_BYTES = 12
TIER_COMPACT_FROM = 1 << 15
TIER_COMPACT_BUCKET_BYTES = 64  # 9 entries of 7 bytes and a count
TIER_COMPACT_BUCKET_ENTRIES = 9
TIER_COMPACT_GROWN_PERCENT = 96
TIER_COMPACT_SHARD_BYTES = 16 + TIER_COMPACT_BUCKET_BYTES
TIER_SEGMENT_BYTES = 1 << 20
TIER_SEGMENT_MAX_RECORDS = 8192
# A tiered plan warns when RAM keeps fewer of a rank's rows than this fraction.
MIN_RAM_FRACTION = 0.05


# Slots per optimizer name, as the row-wise kernels lay them out with the optimizer's defaults
# (optimizer_rules.py; a test checks each against rule_for).
OPTIMIZER_SLOTS = {
    "sgd": 0,
    "momentum": 1,
    "nesterov": 1,
    "adagrad": 1,
    "rmsprop": 1,
    "adam": 2,
    "adamw": 2,
    "amsgrad": 3,
    "adamax": 2,
    "adadelta": 2,
    "ftrl": 2,
}


def num_slots(optimizer: str | Optimizer | None) -> int:
    """Optimizer slots per row: for a name (OPTIMIZER_SLOTS), None (0) or an optimizer.

    Raises:
      ValueError: an unknown name, or an optimizer without a row-wise kernel.
    """
    if optimizer is None:
        return 0
    if isinstance(optimizer, str):
        name = optimizer.lower()
        if name not in OPTIMIZER_SLOTS:
            raise ValueError(
                f"unknown optimizer {optimizer!r}: one of {sorted(OPTIMIZER_SLOTS)} or an "
                "optimizer object"
            )
        return OPTIMIZER_SLOTS[name]
    return len(rule_for(unwrap(optimizer)).slots)


# --- layouts --------------------------------------------------------------------------------


def hash_index_slots(rows: int) -> int:
    """Slots of the hash index after `rows` inserts: the smallest power of two >= 16 that keeps
    the load <= 3/4."""
    num, den = HASH_MAX_LOAD
    slots = HASH_MIN_INDEX_SLOTS
    while rows * den > slots * num:
        slots *= 2
    return slots


def hash_stride(dim: int, slots: int, dtype: DTypeLike = "float32") -> int:
    """Floats per record of a hash table stored in `dtype`: the value (dim floats, or dim 16-bit
    values packed two to a float), then each float32 slot (HashTable::stride)."""
    value = (dim + 1) // 2 if tf.as_dtype(dtype) in HALF_DTYPES else dim
    return value + dim * slots


def hash_table_bytes(rows: int, dim: int, slots: int, dtype: DTypeLike = "float32") -> int:
    """Bytes a DynamicVariable's hash table stored in `dtype` takes for `rows` stored rows of
    width dim with `slots` optimizer slots each."""
    if rows <= 0:
        return hash_index_slots(0) * HASH_INDEX_SLOT_BYTES
    stride = hash_stride(dim, slots, dtype)
    chunks = math.ceil(rows / HASH_CHUNK_ROWS)
    return (
        chunks * HASH_CHUNK_ROWS * stride * 4
        + rows * HASH_ROW_META_BYTES
        + math.ceil(rows / 8)
        + hash_index_slots(rows) * HASH_INDEX_SLOT_BYTES
    )


def tier_record_bytes(row_bytes: int) -> int:
    """Bytes of one disk-tier record holding a row of row_bytes (value and slots)."""
    return (TIER_HEADER_BYTES + row_bytes + 7) // 8 * 8


def disk_key_index_bytes(rows: int) -> int:
    """The most bytes the key index of a disk tier reaches with `rows` keys, as
    DiskIndex::BytesFor of an index that has not been compact yet."""
    if rows <= TIER_COMPACT_FROM:
        return hash_index_slots(rows) * TIER_INDEX_ENTRY_BYTES
    shards = max(4096, rows // 512 + 1)
    buckets = rows * 100 // (TIER_COMPACT_GROWN_PERCENT * TIER_COMPACT_BUCKET_ENTRIES)
    return shards * TIER_COMPACT_SHARD_BYTES + TIER_COMPACT_BUCKET_BYTES * buckets


def tier_index_bytes(rows: int, record_bytes: int) -> int:
    """What a disk tier charges to its table's ram_budget for its index: the size it reaches with
    all `rows` of the table on disk (the key index, a bit per record slot of a file up to twice
    its rows plus three segments, two 4-byte counts and an 8-byte generation per segment), as
    RowTierFile::IndexBytesFor."""
    segment = min(max(TIER_SEGMENT_BYTES // record_bytes, 1), TIER_SEGMENT_MAX_RECORDS)
    slots = 2 * rows + 3 * segment
    return disk_key_index_bytes(rows) + slots // 8 + 16 * (slots // segment + 1)


def _ram_rows_bytes(ram_rows: int, stride: int) -> int:
    """RAM that `ram_rows` rows of `stride` floats take in a tiered table: each with its
    bookkeeping, a bit and a free-list entry, and a hash index at load <= 3/4."""
    per_row = stride * 4 + HASH_ROW_META_BYTES + 1 + 8
    return ram_rows * per_row + hash_index_slots(ram_rows) * HASH_INDEX_SLOT_BYTES


def tier_ram_rows(budget: int, stride: int) -> int:
    """The most rows of `stride` floats a tiered table keeps in RAM within `budget` bytes (what
    is left beside the disk index), as HashTable::RamRowLimit."""
    lo, hi = 0, max(budget // (stride * 4 + HASH_ROW_META_BYTES + 1 + 8), 0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _ram_rows_bytes(mid, stride) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def tier_budget_for(rows: int, ram_rows: int, stride: int) -> int:
    """The ram_budget with which a tiered table of `rows` rows of `stride` floats keeps
    `ram_rows` of them in RAM: the disk index (charged for every row) and the RAM rows."""
    index = tier_index_bytes(rows, tier_record_bytes(stride * 4))
    return index + _ram_rows_bytes(ram_rows, stride)


def static_table_bytes(
    rows: int, dim: int, dtype: DTypeLike, slots: int, trained: bool = True
) -> int:
    """Bytes of `rows` rows of a sok.Variable in `dtype` with `slots` optimizer slots;
    trained: with the int64 per row in which the row-wise kernels record the last step that
    changed it."""
    dtype = tf.as_dtype(dtype)
    per_row: int = dim * dtype.size + slots * dim * row_dtype(dtype).size
    return rows * (per_row + (8 if trained else 0))


def human_bytes(n: float | None) -> str:
    """A byte count as people read it ("1.5 MiB"); "-" for None."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def format_entries(entries: Sequence[MemoryEntry], with_rank: bool) -> str:
    """The str() of a MemoryPlan (with_rank) or a MemoryReport: one aligned line per entry."""
    head = ["table", "kind", "rows RAM", "RAM", "rows disk", "disk", "budget"]
    # A report has counters; a plan has a predicted hit rate only.
    has_rate = bool(entries) and "hit_rate" in entries[0]
    has_counters = bool(entries) and "spills" in entries[0]
    if with_rank:
        head = ["rank"] + head
    head += ["hit rate"] * has_rate + ["spills", "evictions"] * has_counters
    rows = []
    for e in entries:
        row = [e["name"], e["kind"], f"{e['rows_ram']:,}", human_bytes(e["bytes_ram"])]
        row += [f"{e['rows_disk']:,}", human_bytes(e["bytes_disk"]), human_bytes(e["ram_budget"])]
        if with_rank:
            row = [str(e["rank"])] + row
        if has_rate:
            row.append("-" if e["hit_rate"] is None else f"{e['hit_rate']:.3f}")
        if has_counters:
            row += [f"{e['spills']:,}", f"{e['evictions']:,}"]
        rows.append(row)
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows)]

    def fmt(r: Sequence[object]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()

    return "\n".join([fmt(head)] + [fmt(r) for r in rows])
