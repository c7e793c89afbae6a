"""An op's arguments by name: a wrapper passes its own to the op (run_op), a gradient function
reads the op's inputs (inputs_by_name), whose `op.inputs` is flat: a list input (`N * T`)
takes N places, so positions would restate the op's registration; and the gradients of its
outputs, zeros where the loss uses none (dense_grads)."""

from collections.abc import Callable
from typing import Any, TypeVar

import tensorflow as tf

from sok_lite._loader import ops as _ops
from sok_lite._tf_internals import op_def

_F = TypeVar("_F", bound=Callable[..., Any])


def op_wrapper(fn: _F) -> _F:
    """Marks `fn`, a wrapper that hands its `locals()` to run_op, as a function AutoGraph calls
    unconverted: a converted function's locals hold AutoGraph's own names (fscope, ...), and a
    wrapper has no Python control flow to convert."""
    unconverted: _F = tf.autograph.experimental.do_not_convert(fn)
    return unconverted


def run_op(op: str, args: dict[str, Any], **converted: Any) -> Any:
    """Runs an op of the library on a wrapper's arguments, each under its own name.

    Args:
      op: the op's Python name without its "sok_lite_" prefix ("unique_ids" runs
        SokLiteUniqueIds).
      args: the wrapper's arguments by name (its `locals()`, taken first thing, in a function
        marked with op_wrapper), named as the op names its inputs and attributes; `name`, when
        there, is the name scope of the op (None: "sok_lite_<op>") rather than an argument.
      **converted: arguments that replace those of `args` of the same name (converted:
        `step=tf.cast(step, tf.int64)`), or that the op takes besides them.

    Returns:
      The op's outputs.
    """
    args = {**args, **converted}
    run = getattr(_ops(), f"sok_lite_{op}")
    if "name" not in args:
        return run(**args)
    with tf.name_scope(args.pop("name") or f"sok_lite_{op}"):
        return run(**args)


def inputs_by_name(op) -> dict:
    """{input name: tensor, or list of tensors for a list input}, in the op's registration."""
    named, pos = {}, 0
    for arg in op_def(op.type).input_arg:
        if arg.number_attr or arg.type_list_attr:
            if arg.number_attr:
                count = op.get_attr(arg.number_attr)
            else:
                count = len(op.get_attr(arg.type_list_attr))
            named[arg.name] = list(op.inputs[pos : pos + count])
            pos += count
        else:
            named[arg.name] = op.inputs[pos]
            pos += 1
    return named


def dense_grads(op, grads) -> list[tf.Tensor]:
    """The gradients of op's outputs as tensors, zeros for an output the loss does not use."""
    return [
        tf.zeros_like(out) if g is None else tf.convert_to_tensor(g)
        for g, out in zip(grads, op.outputs)
    ]
