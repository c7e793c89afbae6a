"""The lookup op family: unique ids -> gather rows -> combine per sample, and the gradients.

Each wrapper takes lists (one entry per table) so that a whole step's tables run in one op.
"""

import tensorflow as tf

from sok_lite._tf_internals import static_rows
from sok_lite.ops.op_inputs import dense_grads, inputs_by_name, op_wrapper, run_op


@op_wrapper
def row_splits_from_row_ids(row_ids, nrows, table_name="", name=None):
    """Row splits [nrows + 1] of a 2-D SparseTensor from its indices[:, 0] (row-major checked)."""
    return run_op("row_splits_from_row_ids", locals())


@op_wrapper
def unique_ids(
    ids: list[tf.Tensor],
    row_splits: list[tf.Tensor],
    num_rows: list[int],
    hotness: list[int],
    table_names: list[str],
    name: str | None = None,
) -> tuple[list[tf.Tensor], list[tf.Tensor]]:
    """Validates and deduplicates the ids of each table.

    Args:
      ids: list of int64 [n_t] flat ids.
      row_splits: list of int64 [batch_t + 1].
      num_rows: list of int, ids must lie in [0, num_rows) (-1: any value, for hash tables).
      hotness: list of int, the most ids per sample (0: no limit).
      table_names: per table, the label that starts its error messages ("table 1 ('items')").

    Returns:
      (unique_ids, inverse): lists of int64 [u_t] and int32 [n_t].

    Raises:
      tf.errors.InvalidArgumentError: an id out of range, a sample longer than its hotness, or
        malformed row_splits; the message names the table.
    """
    return run_op("unique_ids", locals())


@op_wrapper
def gather_rows(
    handles: list[tf.Tensor],
    indices: list[tf.Tensor],
    dtype: tf.DType,
    table_names: list[str],
    per_sample: bool = False,
    name: str | None = None,
) -> list[tf.Tensor]:
    """Reads rows `indices[t]` of resource variable `handles[t]` in place; list of [u_t, dim_t]
    of `dtype` (float32 for bfloat16 / float16 variables: their rows are widened as read).

    per_sample: the indices are the ids of samples that have one id each, so the rows are the
    lookup's output: an id out of range is named with its sample, and the gradient of a table
    is deduplicated (one summed row per distinct id) as the deduplicated lookup's is.
    """
    return run_op("gather_rows", locals())


@op_wrapper
def segment_combine(
    rows: list[tf.Tensor],
    inverse: list[tf.Tensor],
    row_splits: list[tf.Tensor],
    weights: list[tf.Tensor],
    combiners: list[str],
    name: str | None = None,
) -> list[tf.Tensor]:
    """Per-sample combine of gathered rows; list of [batch_t, dim_t]. weights: [n_t] or [0]."""
    return run_op("segment_combine", locals())


@op_wrapper
def segment_combine_grad(grads, inverse, row_splits, weights, num_unique, combiners):
    """The gradient of segment_combine: per table [num_unique_t, dim_t], one summed row per
    unique id."""
    return run_op("segment_combine_grad", locals())


tf.no_gradient("SokLiteRowSplitsFromRowIds")
tf.no_gradient("SokLiteUniqueIds")
tf.no_gradient("SokLiteSegmentCombineGrad")


def _num_tables(op) -> int:
    return op.get_attr("N")


@tf.RegisterGradient("SokLiteGatherRows")
def _gather_rows_grad(op, *grads):
    """The gradient of a table is an IndexedSlices over the rows that were read."""
    n = _num_tables(op)
    inputs = inputs_by_name(op)
    handles, indices = inputs["handles"], inputs["indices"]
    if op.get_attr("per_sample"):
        grads, indices = _summed_per_id(op, handles, indices, grads)
    slices = []
    for handle, idx, grad in zip(handles, indices, grads):
        dense_shape = tf.raw_ops.VariableShape(input=handle, out_type=tf.int64)
        # An op of the gradient's own graph: a forward tensor returned as it is breaks the
        # backward function of a tf.function differentiated from outside.
        slices.append(tf.IndexedSlices(grad, tf.identity(idx), dense_shape))
    return slices + [None] * n


def _summed_per_id(op, handles: list, ids: list, grads) -> tuple[list, list]:
    """The gradients of a per-sample gather (one id a sample), one summed row per distinct id,
    with the ops and order of the deduplicated lookup (unique ids, then the combine gradient of
    one-id samples): the same values, bit for bit. The deduplication reads only the ids, so it
    can run while the forward pass still does. In a graph it checks them against each table's
    static rows, as the lookup's own would: an optimizer step then takes its rows as checked."""
    names = [name.decode() for name in op.get_attr("table_names")]
    splits = [tf.range(tf.size(i, out_type=tf.int64) + 1) for i in ids]
    num_rows = [static_rows(h) for h in handles]
    unique, inverse = unique_ids(ids, splits, num_rows, [0] * len(ids), names)
    num_unique = [tf.size(u, out_type=tf.int64) for u in unique]
    grads = dense_grads(op, grads)
    weights = [tf.zeros([0], g.dtype) for g in grads]
    summed = segment_combine_grad(
        grads,
        inverse,
        splits,
        weights,
        num_unique,
        ["sum"] * len(ids),
    )
    return list(summed), list(unique)


@tf.RegisterGradient("SokLiteSegmentCombine")
def _segment_combine_grad(op, *grads):
    """One summed gradient row per unique id (the rows input); weights get no gradient."""
    n = _num_tables(op)
    inputs = inputs_by_name(op)
    rows, inverse = inputs["rows"], inputs["inverse"]
    row_splits, weights = inputs["row_splits"], inputs["weights"]
    grads = dense_grads(op, grads)
    num_unique = [tf.shape(r, out_type=tf.int64)[0] for r in rows]
    row_grads = segment_combine_grad(
        grads, inverse, row_splits, weights, num_unique, op.get_attr("combiners")
    )
    return list(row_grads) + [None] * (3 * n)
