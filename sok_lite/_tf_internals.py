"""The TensorFlow internals sok_lite relies on, in one place.

Each name here is private to TensorFlow; tests/api/test_package.py
(test_private_tensorflow_names_still_exist) fails loudly if one moves.
"""

from tensorflow.python.debug.lib import check_numerics_callback
from tensorflow.python.framework import op_def_registry
from tensorflow.python.ops import resource_variable_ops
from tensorflow.python.trackable import base as trackable_base

# The resource-variable class that tf.Variable builds in TF2; sok_lite.Variable extends it.
ResourceVariable = resource_variable_ops.ResourceVariable
# A variable over an existing resource handle; sok_lite.DynamicVariable wraps its hash table so
# that tapes, Keras and tf.train.Checkpoint treat it as a variable.
BaseResourceVariable = resource_variable_ops.BaseResourceVariable
# The checkpoint key of a variable's value; a bfloat16 optimizer slot saves its float32 view
# under it (sok_lite/optim/slots.py), so that float32 and bfloat16 slots load into each other.
VARIABLE_VALUE_KEY = trackable_base.VARIABLE_VALUE_KEY
# The checkpointable base with no automatic attribute tracking (that view's base class).
Trackable = trackable_base.Trackable


def variable_accessed(variable) -> None:
    """Tells active GradientTapes (and the FuncGraph) that an op reads `variable`.

    Our ops take the variable's resource handle, which TF's own read path would otherwise
    record; without this, tape.gradient(loss, variable) returns None.
    """
    resource_variable_ops.variable_accessed(variable)


def check_numerics_enabled() -> bool:
    """Whether tf.debugging.enable_check_numerics() is on in this thread (TF keeps it per
    thread, in the state that disable_check_numerics() clears)."""
    return hasattr(check_numerics_callback._state, "check_numerics_callback")


def op_def(op_type: str):
    """The registered OpDef of an op type (its inputs' names and list lengths), or None."""
    return op_def_registry.get(op_type)
