"""The hash table op family and the gradients of its lookups.

The ops keep the names they were registered with, SokLiteDynamic* ("dynamic" is the family's
first name, as in sok_lite.DynamicVariable); `table` is the resource handle of one rank's table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import tensorflow as tf

from sok_lite.ops import lookup_ops
from sok_lite.ops.op_inputs import inputs_by_name, op_wrapper, run_op

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


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


@op_wrapper
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
    """The resource handle of this rank's hash table (created on first call). init: the
    initializer of new rows. With tier_path, rows beyond ram_budget bytes of RAM live in a file
    in that directory. storage_dtype: the values' dtype (float32, bfloat16 or float16);
    rounding_seed: bfloat16's stochastic rounding of updated rows."""
    attrs = dict(locals())
    del attrs["init"]
    return run_op(
        "dynamic_table", attrs, init_kind=init.kind, seed=init.seed, init_a=init.a, init_b=init.b
    )


@op_wrapper
def lookup(table: tf.Tensor, keys: tf.Tensor, dim: int, table_name: str = "") -> tf.Tensor:
    """Finds or creates the rows of int64 `keys`; [n, dim] float32."""
    return run_op("dynamic_lookup", locals())


@op_wrapper
def lookup_combine(
    table: tf.Tensor,
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
    return run_op("dynamic_lookup_combine", locals())


@op_wrapper
def apply(
    table: tf.Tensor,
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
    return run_op("dynamic_apply", locals(), step=tf.cast(step, tf.int64))


def _since(since_step: int | None) -> tf.Tensor:
    """The since_step input: rows changed after that optimizer step (None: every row)."""
    return tf.constant(INT64_MIN if since_step is None else since_step, tf.int64)


@op_wrapper
def export(
    table: tf.Tensor,
    with_slots: bool = False,
    since_step: int | None = None,
    table_name: str = "",
) -> tuple[tf.Tensor, tf.Tensor]:
    """(keys, rows) of this rank; since_step: only rows changed after that optimizer step."""
    return run_op("dynamic_export", locals(), since_step=_since(since_step))


@op_wrapper
def export_range(
    table: tf.Tensor,
    cursor: int,
    limit: int,
    with_slots: bool = False,
    since_step: int | None = None,
    table_name: str = "",
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(keys, rows, next_cursor): at most `limit` rows of this rank from position `cursor` (0
    first) over the RAM rows then the rows on disk; next_cursor -1 when done. CPU tables only."""
    return run_op(
        "dynamic_export_range",
        locals(),
        since_step=_since(since_step),
        cursor=tf.constant(cursor, tf.int64),
        limit=tf.constant(limit, tf.int64),
    )


@op_wrapper
def memory_stats(table: tf.Tensor) -> tf.Tensor:
    """int64 [9]: rows_ram, rows_disk, bytes_ram, bytes_disk, ram_budget (-1: unbounded), hits,
    misses, spills, evictions of this rank's table. CPU tables only."""
    return run_op("dynamic_memory_stats", locals())


@op_wrapper
def prefetch(
    table: tf.Tensor,
    keys: tf.Tensor,
    owner: int,
    rank: int,
    num_ranks: int,
    wait_for_lookup: bool = True,
    table_name: str = "",
) -> tf.Tensor:
    """Reads the rows of this rank's `keys` (owner: the localized rank, or OWNER_BY_HASH) that
    are on the disk tier back into RAM ahead of their lookup; int64 scalar: the rows read back.
    Best effort: a failure of the tier is left to the lookup to raise."""
    return run_op("dynamic_prefetch", locals())


@op_wrapper
def assign(
    table: tf.Tensor,
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
    return run_op(
        "dynamic_assign", locals(), step=tf.cast(step, tf.int64), slot_init=list(slot_init)
    )


@op_wrapper
def size(table: tf.Tensor) -> tf.Tensor:
    return run_op("dynamic_size", locals())


@op_wrapper
def clear(table: tf.Tensor) -> tf.Operation:
    return run_op("dynamic_clear", locals())


@op_wrapper
def swap_rows(table: tf.Tensor, staged: tf.Tensor) -> tf.Operation:
    """Exchanges the rows of two host tables (see SokLiteDynamicSwapRows)."""
    return run_op("dynamic_swap_rows", locals())


@op_wrapper
def evict(table: tf.Tensor, steps_unseen: tf.Tensor) -> tf.Tensor:
    return run_op("dynamic_evict", locals())


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
