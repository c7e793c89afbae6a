"""The exchange op family: packing the id and vector messages of the distributed lookup around
the communicator's all-to-alls, and their gradients (layouts in kernels/core/exchange.h)."""

import tensorflow as tf

from sok_lite._loader import ops as _ops
from sok_lite.ops.op_inputs import dense_grads, inputs_by_name, op_wrapper, run_op


@op_wrapper
def partition_by_owner(
    unique_ids: list[tf.Tensor], num_ranks: int, localized_ranks: list[int], name: str | None = None
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """Builds the id message from each table's unique global ids.

    Args:
      unique_ids: list of int64 [u_t] global ids, one per table.
      num_ranks: the number of ranks.
      localized_ranks: per table, -1 (distributed), -2 (hash table: owner from the key's hash)
        or the rank holding the whole table.

    Returns:
      (message, splits, counts, send_pos): the int64 message, its [num_ranks] segment sizes, the
      [num_ranks * T] id counts per (rank, table) and, per sent id, its index in its table's
      unique ids.
    """
    return run_op("partition_by_owner", locals())


@op_wrapper
def gather_for_peers(
    handles: list[tf.Tensor],
    message: tf.Tensor,
    splits: tf.Tensor,
    dtype: tf.DType,
    dims: list[int],
    dynamic: list[bool],
    table_names: list[str],
    name: str | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Answers a received id message with the flattened local rows; (vectors, vector_splits).

    dynamic: per table, True for a hash table (rows found or created by key); the op's
    attribute keeps the name it was registered with.
    """
    return run_op("gather_for_peers", locals())


@op_wrapper
def unpack_rows(
    vectors: tf.Tensor,
    counts: tf.Tensor,
    send_pos: tf.Tensor,
    dims: list[int],
    name: str | None = None,
) -> list[tf.Tensor]:
    """Per-table [u_t, dim_t] rows, in unique order, from the received vector message."""
    return run_op("unpack_rows", locals(), N=len(dims))


tf.no_gradient("SokLitePartitionByOwner")
tf.no_gradient("SokLitePackRows")
tf.no_gradient("SokLiteReduceForOwner")


@tf.RegisterGradient("SokLiteUnpackRows")
def _unpack_rows_grad(op, *grads):
    inputs = inputs_by_name(op)
    counts, send_pos = inputs["counts"], inputs["send_pos"]
    grads = dense_grads(op, grads)
    packed = _ops().sok_lite_pack_rows(rows=grads, counts=counts, send_pos=send_pos)
    return [packed, None, None]


@tf.RegisterGradient("SokLiteGatherForPeers")
def _gather_for_peers_grad(op, grad_vectors, unused_grad_splits):
    """Sums what every rank sent back per local row: one IndexedSlices row per owned id."""
    n = op.get_attr("N")
    inputs = inputs_by_name(op)
    handles, message, splits = inputs["handles"], inputs["message"], inputs["splits"]
    dims = op.get_attr("dims")
    rows, values = _ops().sok_lite_reduce_for_owner(
        grads=grad_vectors, message=message, splits=splits, N=n, dims=dims
    )
    slices = []
    for handle, r, v, is_hash in zip(handles, rows, values, op.get_attr("dynamic")):
        if is_hash:  # indices are keys: no dense shape
            slices.append(tf.IndexedSlices(v, r))
            continue
        dense_shape = tf.raw_ops.VariableShape(input=handle, out_type=tf.int64)
        slices.append(tf.IndexedSlices(v, r, dense_shape))
    return slices + [None, None]
