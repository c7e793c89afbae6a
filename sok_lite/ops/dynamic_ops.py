"""The dynamic (hash) table op family and the gradient of its lookup."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import tensorflow as tf

from sok_lite._loader import ops as _ops
from sok_lite.ops import lookup_ops
from sok_lite.ops.op_inputs import inputs_by_name


class RowInit(Protocol):
    """What the table op takes of a per-key initializer (a tables.initializers.RowInitializer)."""

    @property
    def kind(self) -> str: ...
    @property
    def a(self) -> float: ...
    @property
    def b(self) -> float: ...
    @property
    def seed(self) -> int: ...


def create_table(
    shared_name: str,
    dim: int,
    init: RowInit,
    capacity: int = 0,
    policy: str = "lru",
    min_count: int = 1,
    tier_path: str = "",
    ram_budget: int = 0,
    storage_dtype: tf.DType = tf.float32,
    rounding_seed: int = 0,
) -> tf.Tensor:
    """The resource handle of this rank's hash table (created on first call). With tier_path,
    rows beyond ram_budget bytes of RAM live in a file in that directory. storage_dtype: the
    values' dtype (float32, bfloat16 or float16); rounding_seed: bfloat16's stochastic
    rounding of updated rows."""
    return _ops().sok_lite_dynamic_table(
        shared_name=shared_name,
        dim=dim,
        init_kind=init.kind,
        seed=init.seed,
        init_a=init.a,
        init_b=init.b,
        capacity=capacity,
        policy=policy,
        min_count=min_count,
        tier_path=tier_path,
        ram_budget=ram_budget,
        storage_dtype=storage_dtype,
        rounding_seed=rounding_seed,
    )


def lookup(handle: tf.Tensor, keys: tf.Tensor, dim: int, table_name: str = "") -> tf.Tensor:
    """Finds or creates the rows of int64 `keys`; [n, dim] float32."""
    return _ops().sok_lite_dynamic_lookup(table=handle, keys=keys, dim=dim, table_name=table_name)


def lookup_combine(
    handle: tf.Tensor,
    ids: tf.Tensor,
    row_splits: tf.Tensor,
    weights: tf.Tensor,
    dim: int,
    combiner: str,
    hotness: int,
    table_name: str = "",
) -> tf.Tensor:
    """One rank's lookup_sparse on a hash table: finds or creates the rows of int64 `ids` and
    combines them per sample in one pass (ids not deduplicated); [batch, dim] float32.
    weights: [n] float32 or [0] (all 1)."""
    return _ops().sok_lite_dynamic_lookup_combine(
        table=handle,
        ids=ids,
        row_splits=row_splits,
        weights=weights,
        dim=dim,
        combiner=combiner,
        hotness=hotness,
        table_name=table_name,
    )


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def apply(
    handle: tf.Tensor,
    keys: tf.Tensor,
    grads: tf.Tensor,
    hyper: tf.Tensor,
    kind: str,
    slot_init: Sequence[float],
    table_name: str = "",
    step: int | tf.Tensor = INT64_MAX,
) -> tf.Operation:
    """One optimizer step on the stored rows of `keys` and their in-table slots; the rows count
    as changed at optimizer step `step` (incremental dumps)."""
    return _ops().sok_lite_dynamic_apply(
        table=handle,
        keys=keys,
        grads=grads,
        hyper=hyper,
        step=tf.cast(step, tf.int64),
        kind=kind,
        slot_init=slot_init,
        table_name=table_name,
    )


def export(
    handle: tf.Tensor,
    with_slots: bool = False,
    since_step: int | None = None,
    table_name: str = "",
) -> tuple[tf.Tensor, tf.Tensor]:
    """(keys, rows) of this rank; since_step: only rows changed after that optimizer step."""
    since = INT64_MIN if since_step is None else since_step
    return _ops().sok_lite_dynamic_export(
        table=handle,
        since_step=tf.constant(since, tf.int64),
        with_slots=with_slots,
        table_name=table_name,
    )


def export_range(
    handle: tf.Tensor,
    cursor: int,
    limit: int,
    with_slots: bool = False,
    since_step: int | None = None,
    table_name: str = "",
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(keys, rows, next_cursor): at most `limit` rows of this rank from position `cursor` (0
    first) over the RAM rows then the rows on disk; next_cursor -1 when done. CPU tables only."""
    since = INT64_MIN if since_step is None else since_step
    return _ops().sok_lite_dynamic_export_range(
        table=handle,
        since_step=tf.constant(since, tf.int64),
        cursor=tf.constant(cursor, tf.int64),
        limit=tf.constant(limit, tf.int64),
        with_slots=with_slots,
        table_name=table_name,
    )


def memory_stats(handle: tf.Tensor) -> tf.Tensor:
    """int64 [9]: rows_ram, rows_disk, bytes_ram, bytes_disk, ram_budget (-1: unbounded), hits,
    misses, spills, evictions of this rank's table. CPU tables only."""
    return _ops().sok_lite_dynamic_memory_stats(table=handle)


def assign(
    handle: tf.Tensor,
    keys: tf.Tensor,
    values: tf.Tensor,
    with_slots: bool = False,
    step: int | tf.Tensor = INT64_MAX,
    table_name: str = "",
    slot_init: Sequence[float] = (),
) -> tf.Operation:
    """Stores rows; they count as changed at optimizer step `step` (default: after any step, so
    every later incremental dump includes them). slot_init: the initial values of slots that
    rows with_slots lay out in a table without slots."""
    return _ops().sok_lite_dynamic_assign(
        table=handle,
        keys=keys,
        values=values,
        step=tf.cast(step, tf.int64),
        with_slots=with_slots,
        table_name=table_name,
        slot_init=list(slot_init),
    )


def size(handle: tf.Tensor) -> tf.Tensor:
    return _ops().sok_lite_dynamic_size(table=handle)


def clear(handle: tf.Tensor) -> tf.Operation:
    return _ops().sok_lite_dynamic_clear(table=handle)


def swap_rows(handle: tf.Tensor, staged: tf.Tensor) -> tf.Operation:
    """Exchanges the rows of two host tables (see SokLiteDynamicSwapRows)."""
    return _ops().sok_lite_dynamic_swap_rows(table=handle, staged=staged)


def evict(handle: tf.Tensor, steps_unseen: tf.Tensor) -> tf.Tensor:
    return _ops().sok_lite_dynamic_evict(table=handle, steps_unseen=steps_unseen)


for _op in (
    "SokLiteDynamicTable",
    "SokLiteDynamicApply",
    "SokLiteDynamicExport",
    "SokLiteDynamicExportRange",
    "SokLiteDynamicMemoryStats",
    "SokLiteDynamicAssign",
    "SokLiteDynamicSize",
    "SokLiteDynamicEvict",
    "SokLiteDynamicClear",
):
    tf.no_gradient(_op)


@tf.RegisterGradient("SokLiteDynamicLookup")
def _lookup_grad(op, grad):
    """The gradient of a hash table: IndexedSlices whose indices are the KEYS looked up."""
    # tf.identity: see _gather_rows_grad in lookup_ops.
    return [tf.IndexedSlices(grad, tf.identity(inputs_by_name(op)["keys"])), None]


@tf.RegisterGradient("SokLiteDynamicLookupCombine")
def _lookup_combine_grad(op, grad):
    """IndexedSlices over the distinct KEYS looked up: the forward does not deduplicate the ids,
    so the gradient does, then sums each key's share of the output gradient."""
    inputs = inputs_by_name(op)
    ids, row_splits, weights = inputs["ids"], inputs["row_splits"], inputs["weights"]
    name = op.get_attr("table_name")
    name = name.decode() if isinstance(name, bytes) else name
    (unique,), (inverse,) = lookup_ops.unique_ids(
        [ids], [row_splits], [-1], [op.get_attr("hotness")], [name]
    )
    combiner = op.get_attr("combiner")
    (rows,) = lookup_ops.segment_combine_grad(
        [tf.convert_to_tensor(grad)],
        [inverse],
        [row_splits],
        [weights],
        [tf.size(unique, out_type=tf.int64)],
        [combiner.decode() if isinstance(combiner, bytes) else combiner],
    )
    return [tf.IndexedSlices(rows, unique), None, None, None]
