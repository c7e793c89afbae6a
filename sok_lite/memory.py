"""How much memory sok_lite tables take on this rank (memory_report) and will take on each
rank before they exist (plan_memory), from the layouts the tables actually use:

- sok.Variable: this rank's rows in the table's dtype; each optimizer slot a float32 (float64
  for a float64 table) variable of the same rows; once the row-wise kernels step it, one int64
  per row for the step that last changed it (sok_lite/slots.py).
- sok.DynamicVariable (kernels/core/hash_table.cc): per stored row a record of dim x (1 +
  slots) float32 (a 16-bit table packs its value two to a float: (dim + 1) / 2 floats, then the
  float32 slots) in chunks of 1,024 rows, 32 bytes of metadata (key, last lookup, lookup count,
  last update) and a bit of occupancy; the index is a power-of-two array of 16-byte slots kept
  at load <= 0.75. With a disk tier the budget also pays for the index of the rows on disk,
  16-32 bytes a key however few rows stay in RAM (tier_index_bytes).

memory_report reads each table's own memory_stats() (a hash table counts its records, indexes
and tiers in C++).
"""

import dataclasses
import math
import numbers
import re
import warnings

import numpy as np
import tensorflow as tf

from sok_lite import comm
from sok_lite.dynamic import DYNAMIC_DTYPES, DynamicVariable
from sok_lite.memory_stats import MEMORY_STATS
from sok_lite.optimizer_rules import rule_for, unwrap
from sok_lite.placement import Placement
from sok_lite.slots import opt_slots, stepped_row_wise
from sok_lite.table_dtypes import HALF_DTYPES, check_table_dtype, row_dtype

# kernels/core/hash_table.h
HASH_CHUNK_ROWS = 1024
HASH_ROW_META_BYTES = 32
HASH_INDEX_SLOT_BYTES = 16
HASH_MIN_INDEX_SLOTS = 16
# kernels/core/hash_table.cc: an insert grows the index when it would pass 3/4 full.
HASH_MAX_LOAD = (3, 4)
# kernels/core/row_tier_file.*: a record on disk is the bookkeeping and a checksum, then the
# row's floats, padded to 8 bytes; files are cut into segments of ~1 MiB, at most 8,192 records.
TIER_HEADER_BYTES = HASH_ROW_META_BYTES + 8
TIER_INDEX_ENTRY_BYTES = 12
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

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})


def parse_bytes(value) -> int | None:
    """Bytes from an int or a string such as "2GiB", "512MiB", "1.5GB" (None stays None).

    Raises:
      ValueError: a negative size or a string that is not a size.
    """
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"a size in bytes must be >= 0, got {value}")
        return int(value)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"{value!r} is not a size: give bytes or a string such as '2GiB'")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def num_slots(optimizer) -> int:
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


def hash_stride(dim: int, slots: int, dtype="float32") -> int:
    """Floats per record of a hash table stored in `dtype`: the value (dim floats, or dim 16-bit
    values packed two to a float), then each float32 slot (HashTable::stride)."""
    value = (dim + 1) // 2 if tf.as_dtype(dtype) in HALF_DTYPES else dim
    return value + dim * slots


def hash_table_bytes(rows: int, dim: int, slots: int, dtype="float32") -> int:
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


def tier_index_bytes(rows: int, record_bytes: int) -> int:
    """What a disk tier charges to its table's ram_budget for its index: the size it reaches with
    all `rows` of the table on disk (12-byte entries at load <= 3/4, a bit per record slot of a
    file up to twice its rows plus three segments, two ints per segment), as
    RowTierFile::IndexBytesFor."""
    capacity = hash_index_slots(rows)
    segment = min(max(TIER_SEGMENT_BYTES // record_bytes, 1), TIER_SEGMENT_MAX_RECORDS)
    slots = 2 * rows + 3 * segment
    return capacity * TIER_INDEX_ENTRY_BYTES + slots // 8 + 8 * (slots // segment + 1)


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


def static_table_bytes(rows: int, dim: int, dtype, slots: int, trained: bool = True) -> int:
    """Bytes of `rows` rows of a sok.Variable in `dtype` with `slots` optimizer slots;
    trained: with the int64 per row in which the row-wise kernels record the last step that
    changed it."""
    dtype = tf.as_dtype(dtype)
    per_row = dim * dtype.size + slots * dim * row_dtype(dtype).size
    return rows * (per_row + (8 if trained else 0))


# --- plan ------------------------------------------------------------------------------------


@dataclasses.dataclass
class TableSpec:
    """A table to plan for.

    Attributes:
      rows: a static table's rows; a hash table's distinct keys expected over the job.
      dim: the row width.
      kind: "static" (sok.Variable) or "hash" (sok.DynamicVariable).
      dtype: the storage dtype (float32, float64, bfloat16, float16; hash tables: float32,
        bfloat16, float16).
      name: a label for the plan.
      mode: "distributed" or "localized:K".
      capacity: a hash table's row bound over all ranks (None: unbounded).
      ram_budget: bytes (or "2GiB") a hash table may keep in RAM per rank with a disk tier
        (None: all in RAM). It pays for the index of the rows on disk first (16-32 bytes a
        key), then for the rows in RAM.
      batch_keys: the distinct keys one batch looks up in the table, over all ranks (None:
        unknown); a tiered plan warns when RAM holds fewer rows than a rank's share of them.
    """

    rows: int
    dim: int
    kind: str = "static"
    dtype: object = "float32"
    name: str | None = None
    mode: str = "distributed"
    capacity: int | None = None
    ram_budget: object = None
    batch_keys: int | None = None

    @classmethod
    def of(cls, spec) -> "TableSpec":
        if isinstance(spec, cls):
            return spec
        if isinstance(spec, dict):
            spec = dict(spec)
            storage = spec.pop("storage", None)
            if storage is not None and "ram_budget" not in spec:
                spec["ram_budget"] = getattr(storage, "ram_budget", None)
            return cls(**spec)
        raise ValueError(f"a table spec is a TableSpec or a dict, got {spec!r}")


def _check_spec(spec: TableSpec, index: int, num_ranks: int) -> str:
    label = spec.name or f"table {index}"
    for field in ("rows", "dim", "batch_keys"):
        value = getattr(spec, field)
        if value is None and field == "batch_keys":
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise ValueError(f"'{label}': {field} must be an int >= 0, got {value!r}")
    if spec.dim == 0:
        raise ValueError(f"'{label}': dim must be > 0")
    if spec.kind not in ("static", "hash"):
        raise ValueError(f"'{label}': kind must be 'static' or 'hash', got {spec.kind!r}")
    dtype = check_table_dtype(spec.dtype, label)
    if spec.kind == "hash" and dtype not in DYNAMIC_DTYPES:
        names = ", ".join(d.name for d in DYNAMIC_DTYPES)
        raise ValueError(f"'{label}': a hash table holds {names} rows, got {dtype.name}")
    placement = Placement.parse(spec.mode)
    if placement.kind == "localized" and placement.rank >= num_ranks:
        raise ValueError(
            f"'{label}': mode {spec.mode!r} puts the table on rank {placement.rank}, but the "
            f"plan has {num_ranks} ranks"
        )
    if spec.kind == "static" and spec.ram_budget is not None:
        raise ValueError(
            f"'{label}': a ram_budget needs a disk tier, which only hash tables (kind='hash', "
            "sok.DynamicVariable) have; a static table is held in RAM whole"
        )
    return label


def _local_rows(spec: TableSpec, rank: int, num_ranks: int) -> int:
    placement = Placement.parse(spec.mode)
    if spec.kind == "static":
        return placement.local_rows(spec.rows, rank, num_ranks)
    if placement.kind == "localized":
        rows = spec.rows if rank == placement.rank else 0
        holders = 1
    else:  # keys spread by hash: each rank expects its share
        rows = math.ceil(spec.rows / num_ranks)
        holders = num_ranks
    if spec.capacity is not None and rows:
        rows = min(rows, math.ceil(spec.capacity / holders))
    return rows


def _plan_table(spec, label: str, slots: int, trained: bool, rank: int, num_ranks: int) -> dict:
    rows = _local_rows(spec, rank, num_ranks)
    if spec.kind == "static":
        full = static_table_bytes(rows, spec.dim, spec.dtype, slots, trained)
    else:
        full = hash_table_bytes(rows, spec.dim, slots, spec.dtype)
    budget = parse_bytes(spec.ram_budget)  # hash tables only (_check_spec)
    rows_ram, bytes_ram = rows, full
    stride = hash_stride(spec.dim, slots, spec.dtype)
    record = tier_record_bytes(stride * 4)
    if budget is not None and full > budget:
        # RAM holds what the budget allows beside the disk index; the rest lives on disk as
        # whole records.
        rows_ram = tier_ram_rows(budget - tier_index_bytes(rows, record), stride)
        bytes_ram = budget
    rows_disk = rows - rows_ram
    return {
        "name": label,
        "kind": spec.kind,
        "rank": rank,
        "rows_ram": rows_ram,
        "rows_disk": rows_disk,
        "bytes_ram": int(bytes_ram),
        "bytes_disk": rows_disk * record,
        "ram_budget": budget,
        "slots": slots,
    }


def _batch_rows(spec: TableSpec, rank: int, num_ranks: int) -> int:
    """The rows of one batch (spec.batch_keys distinct keys) that rank `rank` looks up."""
    if not spec.batch_keys:
        return 0
    placement = Placement.parse(spec.mode)
    if placement.kind == "localized":
        return spec.batch_keys if rank == placement.rank else 0
    return math.ceil(spec.batch_keys / num_ranks)


def _tier_warning(spec: TableSpec, entry: dict, num_ranks: int) -> str | None:
    """Why `entry`, a rank's share of tiered table `spec`, keeps too few rows in RAM: fewer than
    one batch's or under MIN_RAM_FRACTION of them (None: enough)."""
    rows = entry["rows_ram"] + entry["rows_disk"]
    if entry["ram_budget"] is None or not entry["rows_disk"]:
        return None
    batch = min(_batch_rows(spec, entry["rank"], num_ranks), rows)
    least = math.ceil(rows * MIN_RAM_FRACTION)
    if entry["rows_ram"] >= max(batch, least):
        return None
    stride = hash_stride(spec.dim, entry["slots"], spec.dtype)
    index = tier_index_bytes(rows, tier_record_bytes(stride * 4))
    short = (
        f"fewer than the {batch:,} distinct keys of one batch"
        if entry["rows_ram"] < batch
        else f"under {MIN_RAM_FRACTION:.0%}"
    )
    wanted = max(batch, least)
    enough = tier_budget_for(rows, wanted, stride)
    return (
        f"'{entry['name']}': ram_budget {_human(entry['ram_budget'])} keeps "
        f"{entry['rows_ram']:,} of rank {entry['rank']}'s {rows:,} rows in RAM ({short}): the "
        f"index of the rows on disk takes {_human(index)} of it, {index / rows:.1f} bytes a key "
        f"of the table; a ram_budget of {enough:,} bytes ({_human(enough)}) keeps {wanted:,} "
        "rows in RAM"
    )


class MemoryPlan(list):
    """plan_memory's result: one dict per (rank, table), with per-rank totals, and warnings:
    one line per tiered table whose budget keeps too few rows in RAM on some rank."""

    def __init__(self, entries, num_ranks: int, warned=()):
        super().__init__(entries)
        self.num_ranks = num_ranks
        self.warnings = list(warned)

    @property
    def bytes_per_rank(self) -> list[int]:
        """Predicted RAM bytes of each rank, all tables together."""
        totals = [0] * self.num_ranks
        for entry in self:
            totals[entry["rank"]] += entry["bytes_ram"]
        return totals

    @property
    def disk_bytes_per_rank(self) -> list[int]:
        totals = [0] * self.num_ranks
        for entry in self:
            totals[entry["rank"]] += entry["bytes_disk"]
        return totals

    def __str__(self):
        lines = [_format(self, with_rank=True)]
        for rank, (ram, disk) in enumerate(zip(self.bytes_per_rank, self.disk_bytes_per_rank)):
            lines.append(f"rank {rank}: {_human(ram)} in RAM, {_human(disk)} on disk")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def plan_memory(tables, optimizer="adam", num_ranks: int = 1) -> MemoryPlan:
    """Predicts the bytes each rank will need for `tables`, before any is created.

    Static tables: this rank's rows x dim in the table's dtype, plus each optimizer slot
    (float32 beside a 16-bit table) and, with an optimizer, an int64 per row (its last step).
    Hash tables: the rows this rank expects (keys / ranks, at most capacity / ranks) in the
    hash table's chunked layout (row + slots in float32, 32 bytes of metadata, the index at
    load <= 3/4). With a ram_budget, RAM holds min(budget, the full size) and the remaining
    rows go to disk as records (key, row + slots, metadata). The budget pays for the index of
    the rows on disk (16-32 bytes a key) before any row in RAM: a tiered table that keeps
    fewer rows in RAM than one batch's (batch_keys) or under 5% of its rows is warned about
    (warnings.warn, and in the plan's warnings and str()). TF's own buffers (a batch's ids
    and activations) are not tables and are not counted.

    Args:
      tables: TableSpec objects or dicts of their fields, e.g.
        {"rows": 10**6, "dim": 64} or {"rows": 10**8, "dim": 16, "kind": "hash",
        "ram_budget": "2GiB"}.
      optimizer: a name ("adam", "sgd", "adagrad", "ftrl", ...: OPTIMIZER_SLOTS), a Keras
        optimizer, or None (no slots).
      num_ranks: the ranks the tables are spread over.

    Returns:
      A MemoryPlan: a list of dicts (name, kind, rank, rows_ram, rows_disk, bytes_ram,
      bytes_disk, ram_budget, slots) with bytes_per_rank, warnings and a readable str().

    Raises:
      ValueError: a bad spec (naming the table): a dtype a table of its kind cannot store, a
        "localized:K" mode with K >= num_ranks, a ram_budget on a static table; an unknown
        optimizer or num_ranks < 1.

    >>> import sok_lite as sok
    >>> plan = sok.plan_memory([{"rows": 1000, "dim": 8, "name": "t"}], "adam", num_ranks=2)
    >>> plan.bytes_per_rank  # 500 rows x 8 x 4 bytes x (1 + 2 slots) + 8 bytes per row
    [52000, 52000]
    """
    if isinstance(num_ranks, bool) or not isinstance(num_ranks, numbers.Integral):
        raise ValueError(f"num_ranks must be an int >= 1, got {num_ranks!r}")
    if num_ranks < 1:
        raise ValueError(f"num_ranks must be an int >= 1, got {num_ranks}")
    slots = num_slots(optimizer)
    specs = [TableSpec.of(t) for t in tables]
    labels = [_check_spec(spec, i, num_ranks) for i, spec in enumerate(specs)]
    entries = [
        _plan_table(spec, label, slots, optimizer is not None, rank, num_ranks)
        for rank in range(num_ranks)
        for spec, label in zip(specs, labels)
    ]
    found = []  # the first rank short of rows, per table
    for i, spec in enumerate(specs):
        for entry in entries[i :: len(specs)]:
            message = _tier_warning(spec, entry, num_ranks)
            if message:
                found.append(message)
                warnings.warn(message, stacklevel=2)
                break
    return MemoryPlan(entries, num_ranks, found)


# --- report ----------------------------------------------------------------------------------


def _table_label(table) -> str:
    name = getattr(table, "name", None)
    return name.split(":")[0] if isinstance(name, str) else repr(table)


def _static_slot_bytes(table, optimizer) -> tuple[int, int]:
    """(slots, bytes) of the optimizer state held beside static table `table`."""
    if optimizer is None:
        return 0, 0
    held = list(opt_slots(optimizer, table).values())
    total = sum(int(np.prod(s.shape)) * s.dtype.size for s in held)
    if stepped_row_wise(optimizer, table):
        total += int(table.shape[0]) * 8  # the step that last changed each row
    return len(held), total


def table_memory(table, optimizer=None) -> dict:
    """One row of memory_report for `table` on this rank (see memory_report)."""
    hashed = isinstance(table, DynamicVariable)
    if not callable(getattr(table, "memory_stats", None)):
        raise ValueError(
            f"'{_table_label(table)}' ({type(table).__name__}) is not a sok_lite table: "
            "memory_report takes sok.Variable and sok.DynamicVariable objects"
        )
    stats = dict(table.memory_stats())
    missing = [k for k in MEMORY_STATS if k not in stats]
    if missing:
        raise ValueError(f"'{_table_label(table)}': memory_stats() lacks {missing}")
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
        "name": _table_label(table),
        "kind": "hash" if hashed else "static",
        "rank": comm.current().rank,
        **{k: (None if stats[k] is None else int(stats[k])) for k in MEMORY_STATS},
        "hit_rate": hit_rate,
        "slots": slots,
    }


class MemoryReport(list):
    """memory_report's result: one dict per table, and a readable str()."""

    @property
    def bytes_ram(self) -> int:
        return sum(e["bytes_ram"] for e in self)

    @property
    def bytes_disk(self) -> int:
        return sum(e["bytes_disk"] for e in self)

    def __str__(self):
        return (
            f"{_format(self, with_rank=False)}\n"
            f"total: {_human(self.bytes_ram)} in RAM, {_human(self.bytes_disk)} on disk"
        )


def memory_report(tables, optimizer=None) -> MemoryReport:
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
    if not isinstance(tables, (list, tuple)):
        tables = [tables]
    return MemoryReport(table_memory(t, optimizer) for t in tables)


# --- formatting ------------------------------------------------------------------------------


def _human(n) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _format(entries, with_rank: bool) -> str:
    head = ["table", "kind", "rows RAM", "RAM", "rows disk", "disk", "budget"]
    extra = ["hit rate", "spills", "evictions"]
    has_counters = entries and "hit_rate" in entries[0]
    if with_rank:
        head = ["rank"] + head
    if has_counters:
        head += extra
    rows = []
    for e in entries:
        row = [e["name"], e["kind"], f"{e['rows_ram']:,}", _human(e["bytes_ram"])]
        row += [f"{e['rows_disk']:,}", _human(e["bytes_disk"]), _human(e["ram_budget"])]
        if with_rank:
            row = [str(e["rank"])] + row
        if has_counters:
            rate = "-" if e["hit_rate"] is None else f"{e['hit_rate']:.3f}"
            row += [rate, f"{e['spills']:,}", f"{e['evictions']:,}"]
        rows.append(row)
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows)]
    fmt = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(head)] + [fmt(r) for r in rows])
