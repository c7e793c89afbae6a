"""The dynamic (hash) table op family and the gradient of its lookup."""

import tensorflow as tf

from sok_lite._loader import ops as _ops


def create_table(shared_name, dim, init, capacity=0, policy="lru", min_count=1):
    """The resource handle of this rank's hash table (created on first call)."""
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
    )


def lookup(handle, keys, dim, table_name=""):
    """Finds or creates the rows of int64 `keys`; [n, dim] float32."""
    return _ops().sok_lite_dynamic_lookup(table=handle, keys=keys, dim=dim, table_name=table_name)


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def apply(handle, keys, grads, hyper, kind, slot_init, table_name="", step=INT64_MAX):
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


def export(handle, with_slots=False, since_step=None):
    """(keys, rows) of this rank; since_step: only rows changed after that optimizer step."""
    since = INT64_MIN if since_step is None else since_step
    return _ops().sok_lite_dynamic_export(
        table=handle, since_step=tf.constant(since, tf.int64), with_slots=with_slots
    )


def assign(handle, keys, values, with_slots=False, step=INT64_MAX):
    """Stores rows; they count as changed at optimizer step `step` (default: after any step, so
    every later incremental dump includes them)."""
    return _ops().sok_lite_dynamic_assign(
        table=handle,
        keys=keys,
        values=values,
        step=tf.cast(step, tf.int64),
        with_slots=with_slots,
    )


def size(handle):
    return _ops().sok_lite_dynamic_size(table=handle)


def clear(handle):
    return _ops().sok_lite_dynamic_clear(table=handle)


def evict(handle, steps_unseen):
    return _ops().sok_lite_dynamic_evict(table=handle, steps_unseen=steps_unseen)


for _op in (
    "SokLiteDynamicTable",
    "SokLiteDynamicApply",
    "SokLiteDynamicExport",
    "SokLiteDynamicAssign",
    "SokLiteDynamicSize",
    "SokLiteDynamicEvict",
    "SokLiteDynamicClear",
):
    tf.no_gradient(_op)


@tf.RegisterGradient("SokLiteDynamicLookup")
def _lookup_grad(op, grad):
    """The gradient of a hash table: IndexedSlices whose indices are the KEYS looked up."""
    return [tf.IndexedSlices(grad, op.inputs[1]), None]
