"""sok_lite.lookup_sparse: the fused multi-table embedding lookup."""

from collections.abc import Callable, Sequence
from typing import TypeAlias, TypeVar, cast

import tensorflow as tf

from sok_lite import comm
from sok_lite._errors import table_label
from sok_lite._tf_internals import ResourceVariable, variable_accessed
from sok_lite.comm.base import Communicator
from sok_lite.comm.shards import local_shard
from sok_lite.lookup.exported import ServingTable, active_table, combine
from sok_lite.lookup.ragged_input import ids_parts, weight_values
from sok_lite.ops import exchange_ops, lookup_ops
from sok_lite.tables.dynamic import register_multi_rank_read
from sok_lite.tables.table_dtypes import TABLE_DTYPES, row_dtype
from sok_lite.tables.table_kind import TableKind
from sok_lite.tables.variable import read_rows

COMBINERS = ("sum", "mean", "sqrtn")

# A table of a lookup: a sok_lite table, or a resource tf.Variable while there is one rank.
Table: TypeAlias = TableKind | tf.Variable
# The ids of one table: tf.SparseTensor, tf.RaggedTensor or a dense tf.Tensor.
Ids: TypeAlias = tf.SparseTensor | tf.RaggedTensor | tf.Tensor
# How rows of a group of tables are read: (tables, unique ids, labels) -> rows per table.
RowReader: TypeAlias = Callable[
    [Sequence[Table], Sequence[tf.Tensor], Sequence[str]], list[tf.Tensor]
]

_T = TypeVar("_T")


def _per_table(value: _T | Sequence[_T | None] | None, n: int, what: str) -> list[_T | None]:
    """Broadcasts None or a scalar setting to every table; checks a list has one per table."""
    if value is None or isinstance(value, (str, int)):
        # A str is a Sequence too, so the checker cannot tell the scalar from the list here.
        return [cast("_T", value)] * n
    items = list(cast("Sequence[_T | None]", value))  # the same: here it is the list
    if len(items) != n:
        raise ValueError(f"{what} has {len(items)} entries for {n} tables")
    return items


def _check_param(var: Table, table: int) -> None:
    if not isinstance(var, (ResourceVariable, TableKind)):
        raise ValueError(
            f"table {table}: params must be sok_lite.Variable (or a resource "
            f"tf.Variable with one rank), got {type(var).__name__}"
        )
    if var.shape.rank != 2:
        raise ValueError(f"table {table} ('{table_label(var)}'): must be 2-D, got {var.shape}")
    if var.dtype not in TABLE_DTYPES:
        names = ", ".join(d.name for d in TABLE_DTYPES)
        raise ValueError(
            f"table {table} ('{table_label(var)}'): dtype {var.dtype.name} is not "
            f"supported ({names})"
        )


def lookup_sparse(
    params: Table | Sequence[Table],
    sp_ids: Ids | Sequence[Ids],
    sp_weights: Ids | Sequence[Ids | None] | None = None,
    combiners: str | Sequence[str] | None = None,
    *,
    hotness: int | Sequence[int | None] | None = None,
    name: str | None = None,
    use_low_frequency_filter: bool = False,
) -> tf.Tensor | list[tf.Tensor]:
    """Looks up and combines the embeddings of many tables in one fused step.

    Args:
      params: a list of sok_lite.Variable / DynamicVariable, one per table (a single one is
        accepted too).
      sp_ids: per table, a tf.SparseTensor or tf.RaggedTensor [batch, None] of int32/int64 ids,
        or a dense [batch, hotness] tf.Tensor (every sample has exactly hotness ids).
      sp_weights: None, or per table None / a float tensor laid out like the ids.
      combiners: "sum" | "mean" | "sqrtn", one for all tables or one per table (default "sum").
      hotness: keyword only; None, or per table the most ids a sample may have (None/0: no
        limit).
      name: name scope of the ops.
      use_low_frequency_filter: SOK's switch for its HKV tables' admission filter; sok_lite
        admits keys per table instead (DynamicVariable(min_count=k)), so True is refused.

    Returns:
      Per table a [batch, dim] tensor (float32 for a bfloat16 / float16 table: rows are
      widened as they are read and combined in float32; a Keras layer casts to its compute
      dtype); a single tensor when params was a single Variable. A
      sample with no ids gives a row of zeros. The gradient of a table is a tf.IndexedSlices
      over its local shard with one row per unique id (weights get no gradient).

    Raises:
      ValueError: mismatched list lengths, an unknown combiner, non-integer ids, non-2-D inputs,
        or tables whose ids have different static batch sizes (every table of one call takes
        the same batch, as in SOK; the message names two of them and their batch sizes).
      tf.errors.InvalidArgumentError: an id < 0 or >= the table's rows, a sample longer than
        its hotness, or batch sizes that differ when the batch runs; the message names the
        tables and the values.

    >>> import numpy as np, tensorflow as tf, sok_lite as sok
    >>> v = sok.Variable(np.arange(17 * 3).reshape(17, 3), dtype=tf.float32)
    >>> ids = tf.ragged.constant([[1, 1], [3, 4, 5]], dtype=tf.int64)
    >>> sok.lookup_sparse(v, ids).numpy().tolist()
    [[6.0, 8.0, 10.0], [36.0, 39.0, 42.0]]
    """
    if use_low_frequency_filter:
        raise ValueError(
            "use_low_frequency_filter is not supported: give the DynamicVariable min_count=k "
            "to store a key from its k-th occurrence on"
        )
    single = not isinstance(params, (list, tuple))
    # A table with one shard per replica (MirroredStrategy) is read through the running
    # replica's shard.
    params = [local_shard(p) for p in (params if isinstance(params, (list, tuple)) else [params])]
    if single:
        sp_ids = [sp_ids]
        sp_weights = None if sp_weights is None else [sp_weights]
    n = len(params)
    if n == 0:
        raise ValueError("params is empty")
    if isinstance(sp_ids, (tf.SparseTensor, tf.RaggedTensor, tf.Tensor)) or len(sp_ids) != n:
        raise ValueError(f"sp_ids must be a list with one entry per table ({n})")
    weights = _per_table(sp_weights, n, "sp_weights")
    hotness_per_table: list[int | None] = _per_table(hotness, n, "hotness")
    combiners_per_table: list[str | None] = _per_table(combiners, n, "combiners")
    hot = [int(h or 0) for h in hotness_per_table]
    comb = [c or "sum" for c in combiners_per_table]
    for t, (var, c, h) in enumerate(zip(params, comb, hot)):
        _check_param(var, t)
        if c not in COMBINERS:
            raise ValueError(
                f"table {t} ('{table_label(var)}'): unknown combiner {c!r}, "
                f"expected one of {COMBINERS}"
            )
        if h < 0:
            raise ValueError(f"table {t} ('{table_label(var)}'): hotness must be >= 0, got {h}")
    serving = [active_table(v) for v in params]
    if all(s is not None for s in serving):
        copies = [s for s in serving if s is not None]
        return _serving_lookup(copies, sp_ids, weights, comb, params, single, name)
    communicator = comm.current()
    if communicator.num_ranks > 1:
        _check_distributed_params(params)

    with tf.name_scope(name or "sok_lite_lookup_sparse"):
        labels = [f"table {t} ('{table_label(v)}')" for t, v in enumerate(params)]
        for t, (var, x) in enumerate(zip(params, sp_ids)):
            accepted = var.id_dtypes if isinstance(var, TableKind) else (tf.int32, tf.int64)
            if x.dtype in (tf.int32, tf.int64) and x.dtype not in accepted:
                raise ValueError(
                    f"{labels[t]}: keys must be {' or '.join(d.name for d in accepted)} for "
                    f"this table, got {x.dtype.name}"
                )
        parts = [ids_parts(x, labels[t]) for t, x in enumerate(sp_ids)]
        ids = [p[0] for p in parts]
        splits = [p[1] for p in parts]
        # Every table of a call takes the same batch (as in SOK): checked before any row is
        # read or created.
        checks = _batch_check(sp_ids, splits, labels)
        w = [
            tf.zeros([0], row_dtype(params[t].dtype))
            if weights[t] is None
            else weight_values(weights[t], ids[t], row_dtype(params[t].dtype), labels[t])
            for t in range(n)
        ]
        for var in params:
            variable_accessed(var)
        outputs = [None] * n
        fused = [t for t, v in enumerate(params) if _fused_lookup(v, communicator.num_ranks)]
        one_id = [
            t
            for t in range(n)
            if t not in fused
            and weights[t] is None
            and _one_id_per_sample(params[t], sp_ids[t], communicator.num_ranks)
        ]
        rest = [t for t in range(n) if t not in fused and t not in one_id]
        if one_id:
            with tf.control_dependencies(checks):
                rows = _rows_per_sample(
                    [params[t] for t in one_id],
                    [ids[t] for t in one_id],
                    [labels[t] for t in one_id],
                )
            for t, out in zip(one_id, rows):
                outputs[t] = out
            # A hash table stores keys only once every other table's ids are checked.
            checks = checks + list(rows)
        if rest:

            def pick(values: Sequence[_T]) -> list[_T]:
                return [values[t] for t in rest]

            with tf.control_dependencies(checks):
                combined, unique = _deduplicated_lookup(
                    pick(params),
                    pick(ids),
                    pick(splits),
                    pick(w),
                    pick(hot),
                    pick(comb),
                    pick(labels),
                    communicator,
                )
            checks = checks + unique
            for t, out in zip(rest, combined):
                outputs[t] = out
        if n > 1:  # every other table's ids are checked before a hash table stores a key
            checks += [_hotness_check(splits[t], hot[t], labels[t]) for t in fused if hot[t]]
        with tf.control_dependencies(checks):
            for t in fused:
                outputs[t] = params[t].lookup_combine(
                    ids[t], splits[t], w[t], comb[t], hot[t], labels[t]
                )
    return outputs[0] if single else outputs


def _batch_check(
    sp_ids: Sequence[Ids], splits: Sequence[tf.Tensor], labels: Sequence[str]
) -> list[tf.Operation]:
    """Refuses tables fed different batch sizes (SOK's fused lookup, too, takes one batch for
    every table of a call): from the static shapes where all are known, with no op; else with
    one assert on the row_splits lengths. Returns the assert, or []."""
    if len(sp_ids) < 2:
        return []
    known = [(t, x.shape[0]) for t, x in enumerate(sp_ids) if x.shape[0] is not None]
    for t, batch in known[1:]:
        if batch != known[0][1]:
            first, first_batch = known[0]
            raise ValueError(
                f"{labels[first]} has a batch of {first_batch} samples and {labels[t]} of "
                f"{batch}: {_SAME_BATCH}"
            )
    if len(known) == len(sp_ids):
        return []
    batches = [tf.size(s) - 1 for s in splits]
    stacked = tf.stack(batches)
    # Assert escapes the quotes of string data: the labels go without them.
    per_table = [x for label, b in zip(labels, batches) for x in (label.replace("'", ""), b)]
    same = tf.equal(tf.reduce_min(stacked), tf.reduce_max(stacked))
    return [tf.debugging.Assert(same, [f"batch sizes differ ({_SAME_BATCH}):"] + per_table)]


_SAME_BATCH = "every table of one lookup takes the same batch"


def _hotness_check(splits: tf.Tensor, hotness: int, label: str) -> tf.Operation:
    """Fails as the fused hash-table lookup would on a sample longer than `hotness`, so that a
    call with several tables can refuse it before any table stores a key."""
    longest = tf.reduce_max(tf.concat([[0], splits[1:] - splits[:-1]], 0))
    return tf.debugging.assert_less_equal(
        longest,
        tf.constant(hotness, tf.int64),
        message=f"{label}: a sample has more ids than its hotness {hotness}",
    )


def _one_id_per_sample(var: Table, x: Ids, num_ranks: int) -> bool:
    """Whether the table's output is its rows of the ids as they come: one rank, rows read in
    place (sok_lite.Variable, resource tf.Variable) and dense ids of one id a sample, which
    every combiner returns as they are. The rows are then read straight into the output,
    without a deduplication first (it moves into the gradient, which stays deduplicated)."""
    return (
        num_ranks == 1
        and _reader(var) is read_rows
        and isinstance(x, tf.Tensor)
        and x.shape.rank == 2
        and x.shape[1] == 1
    )


def _rows_per_sample(
    params: Sequence[Table], ids: Sequence[tf.Tensor], labels: Sequence[str]
) -> list[tf.Tensor]:
    """The outputs [batch, dim] of tables whose samples each have one id (_one_id_per_sample):
    their rows, read in one op per row dtype, checked against the tables' rows."""
    rows = [None] * len(params)
    for group in _dtype_groups(params):
        found = lookup_ops.gather_rows(
            [params[t].handle for t in group],
            [ids[t] for t in group],
            row_dtype(params[group[0]].dtype),
            [labels[t] for t in group],
            per_sample=True,
        )
        for t, r in zip(group, found):
            rows[t] = r
    return rows


def _fused_lookup(var: Table, num_ranks: int) -> bool:
    """Whether the table looks up and combines its ids in one op, without deduplication."""
    return isinstance(var, TableKind) and var.combines_in_place(num_ranks)


def _deduplicated_lookup(
    params: list[Table],
    ids: list[tf.Tensor],
    splits: list[tf.Tensor],
    weights: list[tf.Tensor],
    hot: list[int],
    comb: list[str],
    labels: list[str],
    communicator: Communicator,
) -> tuple[list[tf.Tensor], list[tf.Tensor]]:
    """Unique ids per table, their rows (read in place, or from the owners), then the combine.

    labels: the tables' labels in error messages. Returns the combined rows per table and the
    unique ids, whose op checks every table's ids before any row is read or created.
    """
    num_rows = [_global_rows(v) for v in params]
    unique, inverse = lookup_ops.unique_ids(ids, splits, num_rows, hot, labels)
    if communicator.num_ranks == 1:
        rows = _local_rows(params, unique, labels)
    else:
        rows = _exchanged_rows(params, unique, labels, communicator)
    outputs = [None] * len(params)
    for group in _dtype_groups(params):
        combined = lookup_ops.segment_combine(
            [rows[t] for t in group],
            [inverse[t] for t in group],
            [splits[t] for t in group],
            [weights[t] for t in group],
            [comb[t] for t in group],
        )
        for t, out in zip(group, combined):
            outputs[t] = out
    return outputs, list(unique)


def _serving_lookup(
    serving: Sequence[ServingTable],
    sp_ids: Sequence[Ids],
    weights: Sequence[Ids | None],
    comb: Sequence[str],
    params: Sequence[Table],
    single: bool,
    name: str | None,
) -> tf.Tensor | list[tf.Tensor]:
    """Plain-TF lookups of the serving copies (see sok_lite.io.serving): no sok_lite op."""
    outputs = []
    with tf.name_scope(name or "sok_lite_lookup_sparse"):
        for t, (table, x) in enumerate(zip(serving, sp_ids)):
            label = f"table {t} ('{table_label(params[t])}')"
            ids, splits = ids_parts(x, label, plain_tf=True)
            dtype = table.row_dtype
            weight = weights[t]
            w = None if weight is None else tf.cast(weight.values, dtype)
            outputs.append(combine(table.lookup(ids), splits, w, comb[t]))
    return outputs[0] if single else outputs


def _global_rows(var: Table) -> int:
    """The number of valid ids; -1 for any key."""
    if isinstance(var, TableKind):
        return var.id_limit
    rows = var.shape[0]
    return -1 if rows is None else int(rows)


def _dtype_groups(params: Sequence[Table]) -> list[list[int]]:
    """Table indices grouped by row dtype (one combine op per group; 16-bit tables combine
    float32 rows)."""
    groups: dict[tf.DType, list[int]] = {}
    for t, var in enumerate(params):
        groups.setdefault(row_dtype(var.dtype), []).append(t)
    return list(groups.values())


def _check_distributed_params(params: Sequence[Table]) -> None:
    for t, var in enumerate(params):
        if not isinstance(var, TableKind):
            raise ValueError(
                f"table {t} ('{table_label(var)}'): with several ranks every table must be a "
                f"sok_lite.Variable or DynamicVariable, got {type(var).__name__}"
            )
        if row_dtype(var.dtype) != row_dtype(params[0].dtype):
            raise ValueError(
                f"table {t} ('{table_label(var)}'): with several ranks all tables of one call "
                f"share a row dtype ({row_dtype(params[0].dtype).name}; 16-bit tables are read "
                f"as float32), got {var.dtype.name}"
            )


def _reader(var: Table) -> RowReader:
    """How the rows of `var` are read on this rank; a plain resource variable (one rank only)
    is read as a sok_lite.Variable is."""
    return var.read_local if isinstance(var, TableKind) else read_rows


def _local_rows(
    params: Sequence[Table], unique: Sequence[tf.Tensor], labels: Sequence[str]
) -> list[tf.Tensor]:
    """One rank: every row is here; read the unique rows in place (hash tables: find or create).

    Tables read the same way and of one dtype are read together, in one op where the kind can.
    """
    groups: dict[tuple[RowReader, tf.DType], list[int]] = {}
    for t, var in enumerate(params):
        groups.setdefault((_reader(var), row_dtype(var.dtype)), []).append(t)
    rows = [None] * len(params)
    for (read, _), group in groups.items():
        found = read(
            [params[t] for t in group], [unique[t] for t in group], [labels[t] for t in group]
        )
        for t, r in zip(group, found):
            rows[t] = r
    return rows


def _exchanged_rows(
    params: Sequence[Table],
    unique: list[tf.Tensor],
    labels: list[str],
    communicator: Communicator,
) -> list[tf.Tensor]:
    """Several ranks: ask the owners for the unique rows, all tables in one pair of all-to-alls.

    The id message carries per-table counts in front of each destination's ids, so one
    all-to-all of ids and one of vectors serve every table of the call.
    """
    localized = [v.owner_code for v in params]
    message, splits, counts, send_pos = exchange_ops.partition_by_owner(
        unique, communicator.num_ranks, localized
    )
    received, received_splits = communicator.alltoall(message, splits)
    dims = [int(v.shape[1]) for v in params]
    hash_tables = [v.kind == "hash" for v in params]
    vectors, vector_splits = exchange_ops.gather_for_peers(
        [v.handle for v in params],
        received,
        received_splits,
        row_dtype(params[0].dtype),  # 16-bit rows cross the wire widened to float32
        dims,
        hash_tables,
        labels,
    )
    answered, _ = communicator.alltoall(vectors, vector_splits)
    return exchange_ops.unpack_rows(answered, counts, send_pos, dims)


# A hash table read with tf.gather on several ranks: one key per sample, each "combined" alone.
register_multi_rank_read(lambda table, ids: lookup_sparse(table, ids, hotness=1))
