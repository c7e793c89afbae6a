"""Building an optimizer while tf.function traces, without the trace owning its variables.

Without a distribution strategy, Keras' `fit` builds the optimizer inside the first trace of the
training step. Variables created there belong to that trace: tf.function initializes each through
a `tf.cond` and then traces the whole step a second time to leave their creation out. Made under
`variables_made_now`, they are created eagerly and the trace is not re-run. Under a strategy
Keras builds the optimizer before tracing, in the strategy's scope, and this changes nothing.
"""

import contextlib
from collections.abc import Callable, Iterator

import tensorflow as tf


def _not_lifted_when_eager(
    next_creator: Callable[..., tf.Variable], **kwargs: object
) -> tf.Variable:
    # A tf.variable_creator_scope creator. Under a tf.init_scope inside the trace the variable
    # is made eagerly: the tracing function's own creator, which records a variable as the
    # trace's, passes one that asks not to be lifted straight on. Variables made in the graph
    # itself are left as they are.
    if tf.executing_eagerly():
        kwargs["experimental_enable_variable_lifting"] = False
    return next_creator(**kwargs)


def _tracing_without_strategy() -> bool:
    # Under a strategy Keras builds before tracing, and nothing here changes anything.
    return tf.inside_function() and not tf.distribute.has_strategy()


@contextlib.contextmanager
def variables_made_now() -> Iterator[None]:
    """Variables created inside are made now, eagerly, even while a tf.function traces (and
    where no function traces, or a distribution strategy is in scope, as they would be)."""
    if not _tracing_without_strategy():
        yield
        return
    with tf.init_scope(), tf.variable_creator_scope(_not_lifted_when_eager):
        yield


@contextlib.contextmanager
def init_scope_variables_made_now() -> Iterator[None]:
    """Variables created inside under a tf.init_scope of their own (as tf_keras optimizers
    build themselves) are made now, even while a tf.function traces; others as they would be."""
    if not _tracing_without_strategy():
        yield
        return
    with tf.variable_creator_scope(_not_lifted_when_eager):
        yield


class BuildsNow:
    """An optimizer's build() that makes its variables under variables_made_now."""

    def __init__(self, build: Callable[[list], None]) -> None:
        self.build = build

    def __call__(self, var_list: list) -> None:
        with variables_made_now():
            self.build(var_list)
