"""plan_memory: how much memory sok_lite tables will take on each rank before they exist, from
the layouts of sok_lite.memory.layouts."""

import math
import numbers
import warnings
from collections.abc import Iterable, Sequence

from sok_lite.memory import hit_rate, layouts
from sok_lite.memory.layouts import MemoryEntry, format_entries, human_bytes
from sok_lite.tables import TABLE_KINDS, TableSpec
from sok_lite.tables.dynamic_config import DYNAMIC_DTYPES
from sok_lite.tables.placement import Placement
from sok_lite.tables.storage import parse_bytes
from sok_lite.tables.table_dtypes import check_table_dtype
from sok_lite.tables.table_kind import Optimizer


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
    if spec.kind not in TABLE_KINDS:
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
    if spec.kind == "static" and spec.planned_ram_budget is not None:
        raise ValueError(
            f"'{label}': a ram_budget needs a disk tier, which only hash tables (kind='hash', "
            "sok.DynamicVariable) have; a static table is held in RAM whole"
        )
    hit_rate.check_distribution(spec.zipf, spec.key_counts, spec.rows or 0, label)
    return label


def _local_rows(spec: TableSpec, rank: int, num_ranks: int) -> int:
    assert spec.rows is not None  # _check_spec refuses None
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


def _plan_table(
    spec: TableSpec, label: str, slots: int, trained: bool, rank: int, num_ranks: int
) -> MemoryEntry:
    rows = _local_rows(spec, rank, num_ranks)
    if spec.kind == "static":
        full = layouts.static_table_bytes(rows, spec.dim, spec.dtype, slots, trained)
    else:
        full = layouts.hash_table_bytes(rows, spec.dim, slots, spec.dtype)
    budget = spec.planned_ram_budget  # hash tables only (_check_spec)
    budget = None if budget is None else parse_bytes(budget, f"'{label}': ram_budget")
    rows_ram, bytes_ram = rows, full
    stride = layouts.hash_stride(spec.dim, slots, spec.dtype)
    record = layouts.tier_record_bytes(stride * 4)
    if budget is not None and full > budget:
        # RAM holds what the budget allows beside the disk index; the rest lives on disk as
        # whole records.
        rows_ram = layouts.tier_ram_rows(budget - layouts.tier_index_bytes(rows, record), stride)
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


def _tier_warning(spec: TableSpec, entry: MemoryEntry, num_ranks: int) -> str | None:
    """Why `entry`, a rank's share of tiered table `spec`, keeps too few rows in RAM: fewer than
    one batch's or under layouts.MIN_RAM_FRACTION of them (None: enough)."""
    rows = entry["rows_ram"] + entry["rows_disk"]
    if entry["ram_budget"] is None or not entry["rows_disk"]:
        return None
    batch = min(_batch_rows(spec, entry["rank"], num_ranks), rows)
    least = math.ceil(rows * layouts.MIN_RAM_FRACTION)
    if entry["rows_ram"] >= max(batch, least):
        return None
    stride = layouts.hash_stride(spec.dim, entry["slots"], spec.dtype)
    index = layouts.tier_index_bytes(rows, layouts.tier_record_bytes(stride * 4))
    short = (
        f"fewer than the {batch:,} distinct keys of one batch"
        if entry["rows_ram"] < batch
        else f"under {layouts.MIN_RAM_FRACTION:.0%}"
    )
    wanted = max(batch, least)
    enough = layouts.tier_budget_for(rows, wanted, stride)
    return (
        f"'{entry['name']}': ram_budget {human_bytes(entry['ram_budget'])} keeps "
        f"{entry['rows_ram']:,} of rank {entry['rank']}'s {rows:,} rows in RAM ({short}): the "
        f"index of the rows on disk takes {human_bytes(index)} of it, {index / rows:.1f} bytes a "
        f"key of the table; a ram_budget of {enough:,} bytes ({human_bytes(enough)}) keeps "
        f"{wanted:,} rows in RAM"
    )


def _add_hit_rates(spec: TableSpec, label: str, entries: list[MemoryEntry]) -> None:
    """Sets "hit_rate" of `entries`, the ranks' shares of `spec`: the RAM tier's predicted hit
    rate (hit_rate.py), None without a distribution, a tier or rows on the rank, or where a
    batch's keys do not fit in RAM (the lookup fails: see the plan's warning)."""
    for entry in entries:
        entry["hit_rate"] = None
    dist = hit_rate.distribution_of(spec.zipf, spec.key_counts, spec.rows or 0, label)
    held = [e for e in entries if e["rows_ram"] + e["rows_disk"]]
    if dist is None or not held or held[0]["ram_budget"] is None:
        return
    # Keys spread by hash give each rank a random share of them: together the ranks' RAM
    # serves the whole distribution as one cache of all their rows would.
    ram_rows = sum(e["rows_ram"] for e in held)
    batch = None if spec.batch_keys is None else min(spec.batch_keys, dist.keys)
    if batch is not None and batch > ram_rows:
        return
    rate = hit_rate.predict_hit_rate(dist, ram_rows, spec.evict_policy, batch)
    for entry in held:
        entry["hit_rate"] = 1.0 if not entry["rows_disk"] else rate


class MemoryPlan(list[MemoryEntry]):
    """plan_memory's result: one dict per (rank, table), with per-rank totals, and warnings:
    one line per tiered table whose budget keeps too few rows in RAM on some rank."""

    def __init__(
        self, entries: Iterable[MemoryEntry], num_ranks: int, warned: Iterable[str] = ()
    ) -> None:
        super().__init__(entries)
        self.num_ranks = num_ranks
        self.warnings = list(warned)

    @property
    def bytes_per_rank(self) -> list[int]:
        """Predicted RAM bytes of each rank, all tables together."""
        return self._per_rank("bytes_ram")

    @property
    def disk_bytes_per_rank(self) -> list[int]:
        return self._per_rank("bytes_disk")

    def _per_rank(self, field: str) -> list[int]:
        totals = [0] * self.num_ranks
        for entry in self:
            totals[entry["rank"]] += entry[field]
        return totals

    def __str__(self) -> str:
        lines = [format_entries(self, with_rank=True)]
        for rank, (ram, disk) in enumerate(zip(self.bytes_per_rank, self.disk_bytes_per_rank)):
            lines.append(f"rank {rank}: {human_bytes(ram)} in RAM, {human_bytes(disk)} on disk")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def plan_memory(
    tables: Sequence[TableSpec | dict[str, object]],
    optimizer: str | Optimizer | None = "adam",
    num_ranks: int = 1,
) -> MemoryPlan:
    """Predicts the bytes each rank will need for `tables`, before any is created.

    Static tables: this rank's rows x dim in the table's dtype, plus each optimizer slot
    (float32 beside a 16-bit table) and, with an optimizer, an int64 per row (its last step).
    Hash tables: the rows this rank expects (keys / ranks, at most capacity / ranks) in the
    hash table's chunked layout (row + slots in float32, 32 bytes of metadata, the index at
    load <= 3/4). With a ram_budget, RAM holds min(budget, the full size) and the remaining
    rows go to disk as records (key, row + slots, metadata). The budget pays for the index of
    the rows on disk (~8 bytes a key; 16-32 up to 32,768 keys) before any row in RAM: a
    tiered table that keeps fewer rows in RAM than one batch's (batch_keys) or under 5% of its
    rows is warned about (warnings.warn, and in the plan's warnings and str()). TF's own
    buffers (a batch's ids and activations) are not tables and are not counted.

    A tiered spec with the distribution of its ids (zipf=s: Zipf(s) over its rows keys, or
    key_counts: a histogram) gets a predicted hit rate, the share of looked-up ids found in
    RAM once the table has settled (sok_lite/memory/hit_rate.py). The rows in RAM of all ranks
    serve the whole distribution (keys spread by hash give each rank a random share), less
    half a spill (a spill moves a sixteenth of the RAM rows at once). evict_policy "lru":
    Che's approximation, RAM holds the keys seen within the last T ids with
    sum_k (1 - exp(-p_k T)) = the rows in RAM, and hit rate sum_k p_k (1 - exp(-p_k T)).
    "lfu": RAM holds the most frequent keys less the rarer keys the last step read back
    (batch_keys), and the hit rate is their probability mass. Ids are assumed independent
    draws from a fixed distribution; the first lookup of each key (a miss) is not counted.
    Zipf sums its first 4,096 keys and integrates the rest (within 1e-5 of the sum over every
    key): 1e8 keys take milliseconds.

    Args:
      tables: TableSpec objects or dicts of their fields, e.g.
        {"rows": 10**6, "dim": 64} or {"rows": 10**8, "dim": 16, "kind": "hash",
        "ram_budget": "2GiB"}.
      optimizer: a name ("adam", "sgd", "adagrad", "ftrl", ...: OPTIMIZER_SLOTS), a Keras
        optimizer, or None (no slots).
      num_ranks: the ranks the tables are spread over.

    Returns:
      A MemoryPlan: a list of dicts (name, kind, rank, rows_ram, rows_disk, bytes_ram,
      bytes_disk, ram_budget, slots, hit_rate) with bytes_per_rank, warnings and a readable
      str(). hit_rate: the predicted hit rate; None without zipf or key_counts, without a
      disk tier or rows on the rank, or when one batch's keys (batch_keys) do not fit in
      RAM; 1.0 when every row of the rank fits.

    Raises:
      ValueError: a bad spec (naming the table): a dtype a table of its kind cannot store, a
        "localized:K" mode with K >= num_ranks, a ram_budget on a static table, a negative
        zipf, an empty or negative key_counts, one with more keys than rows, or both zipf and
        key_counts; an unknown optimizer or num_ranks < 1.

    >>> import sok_lite as sok
    >>> plan = sok.plan_memory([{"rows": 1000, "dim": 8, "name": "t"}], "adam", num_ranks=2)
    >>> plan.bytes_per_rank  # 500 rows x 8 x 4 bytes x (1 + 2 slots) + 8 bytes per row
    [52000, 52000]
    """
    if isinstance(num_ranks, bool) or not isinstance(num_ranks, numbers.Integral):
        raise ValueError(f"num_ranks must be an int >= 1, got {num_ranks!r}")
    if num_ranks < 1:
        raise ValueError(f"num_ranks must be an int >= 1, got {num_ranks}")
    slots = layouts.num_slots(optimizer)
    specs = [TableSpec.of(t) for t in tables]
    labels = [_check_spec(spec, i, num_ranks) for i, spec in enumerate(specs)]
    entries = [
        _plan_table(spec, label, slots, optimizer is not None, rank, num_ranks)
        for rank in range(num_ranks)
        for spec, label in zip(specs, labels)
    ]
    found = []  # the first rank short of rows, per table
    for i, (spec, label) in enumerate(zip(specs, labels)):
        _add_hit_rates(spec, label, entries[i :: len(specs)])
        for entry in entries[i :: len(specs)]:
            message = _tier_warning(spec, entry, num_ranks)
            if message:
                found.append(message)
                warnings.warn(message, stacklevel=2)
                break
    return MemoryPlan(entries, num_ranks, found)
