"""Errors of our ops as users should read them: the kernel's sentence, without TF's decoration,
and the label (table_label) by which messages name a table.

An eager op error reads "{{function_node __wrapped__SokLiteUniqueIds_...}} <sentence>
[Op:SokLiteUniqueIds] name: ". Every function of the op module (sok_lite._loader.ops()) raises
the same exception type with the sentence only, so every eager call of an op (lookup, table
methods, optimizer steps, dump/load) is clean without a wrapper of its own. Inside a tf.function
the error comes from the function call instead, worded by TF (the failing node, and where it
was defined); the sentence is in it unchanged.
"""

import functools
import re

import tensorflow as tf

_PREFIX = re.compile(r"^\{\{function_node [^}]*\}\}\s*")
_SUFFIX = re.compile(r"\s*\[Op:\w+\](?: name: [^\n]*)?\s*$")


def clean_message(message: str) -> str:
    """`message` without TF's eager decoration around an op error of ours; others unchanged."""
    if "SokLite" not in message or not _PREFIX.match(message):
        return message
    return _SUFFIX.sub("", _PREFIX.sub("", message))


def clean_errors(fn):
    """Decorates `fn` so that the op errors it raises carry the clean message (same type)."""

    # do_not_convert: AutoGraph would try (and fail) to convert the generated op function.
    @tf.autograph.experimental.do_not_convert
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except tf.errors.OpError as e:
            message = clean_message(e.message)
            if message == e.message:
                raise
            raise _with_message(e, message) from None

    return wrapper


def _with_message(error: tf.errors.OpError, message: str) -> tf.errors.OpError:
    if type(error) is tf.errors.OpError:
        return tf.errors.OpError(error.node_def, error.op, message, error.error_code)
    return type(error)(error.node_def, error.op, message)


class CleanOps:
    """An op module whose functions raise clean errors (wrapped once, on first use)."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        if name == "_module":  # not set yet (a copy): no recursion
            raise AttributeError(name)
        value = getattr(self._module, name)
        if callable(value):
            value = clean_errors(value)
        setattr(self, name, value)
        return value

    def __dir__(self):
        return dir(self._module)


def table_label(table: object) -> str:
    """How messages (and the names derived from a table: its optimizer slots, its checkpoint
    entry, its Keras weight path) call a table: its name without TF's output suffix (":0").

    Args:
      table: a table or any object with a string `name`, or the name itself.

    Returns:
      The name before any ":"; repr(table) for an object without a string name.

    >>> import tensorflow as tf
    >>> table_label(tf.Variable([1.0], name="users")), table_label("users:0")
    ('users', 'users')
    """
    name = table if isinstance(table, str) else getattr(table, "name", None)
    return name.split(":")[0] if isinstance(name, str) else repr(table)
