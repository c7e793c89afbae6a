"""An op's inputs by name, for gradient functions: `op.inputs` is flat, and a list input
(`N * T`) takes N places, so positions would restate the op's registration."""

from sok_lite._tf_internals import op_def


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
