"""SokLiteAssignTable: huge pages for static tables whose value is replaced whole (a checkpoint
restore, a whole assign).

New tables and slots come from ops that advise huge pages before writing their buffer, which the
variable adopts (kernels/core/huge_pages.h). TensorFlow's assign would instead hand the variable
the value's own buffer (a restored tensor, written without that advice) or, once the table has
been updated row-wise, a copy in a buffer it allocates; SokLiteAssignTable copies the value into
a buffer advised first. Off with SOK_LITE_HUGE_PAGES=0; tables not placed on a CPU take
TensorFlow's assign.
"""

import os

import tensorflow as tf

from sok_lite.ops.op_inputs import run_op

# Below this a table gains nothing from huge pages (kernels/core/huge_pages.h, kHugePageMinBytes).
HUGE_PAGE_MIN_BYTES = 32 << 20


def assigns_into_huge_pages(var: tf.Variable, value: tf.Tensor) -> bool:
    """Whether a whole assign of `value` to `var` goes through assign_into_huge_pages: a host
    table of at least HUGE_PAGE_MIN_BYTES and a value of its dtype and shape (anything else
    takes TensorFlow's assign, which names the mismatch)."""
    # A graph variable without a device may be placed on a GPU, where the op has no kernel.
    if os.environ.get("SOK_LITE_HUGE_PAGES") == "0" or "CPU" not in var.device.upper():
        return False
    shape = var.shape
    if not shape.is_fully_defined() or shape.num_elements() * var.dtype.size < HUGE_PAGE_MIN_BYTES:
        return False
    return value.dtype == var.dtype and value.shape == shape


def assign_into_huge_pages(
    var: tf.Variable, value: tf.Tensor, read_value: bool = False
) -> tf.Tensor | tf.Operation | None:
    """Copies `value` into a new buffer of `var` advised for huge pages. Returns the op (None
    eagerly), or with read_value the variable's value after it, as tf.Variable.assign does."""
    with tf.device(var.device):
        assigned = run_op("assign_table", {}, table=var.handle, value=value)
    if not read_value:
        return assigned
    with tf.control_dependencies([] if assigned is None else [assigned]):
        return var.read_value()
