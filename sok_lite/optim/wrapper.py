"""sok_lite.keras.OptimizerWrapper: a Keras 3 optimizer for model.compile() that updates
sok_lite tables row-wise and every other weight through the wrapped Keras optimizer."""

from __future__ import annotations

from collections.abc import Iterable

import keras
import tensorflow as tf

from sok_lite._keras_internals import built_variables
from sok_lite.comm.shards import shards_of
from sok_lite.optim.eager_build import variables_made_now
from sok_lite.optim.loss_scaling import adapt_loss_scale_optimizer
from sok_lite.optim.optimizer_rules import WrapsOptimizer, rule_for, unwrap
from sok_lite.optim.row_wise import GradAndVar, apply_gradients, filter_variables, is_table
from sok_lite.tables.table_kind import Optimizer


@keras.saving.register_keras_serializable(package="sok_lite")
class OptimizerWrapper(keras.optimizers.Optimizer, WrapsOptimizer):
    """Wraps a Keras optimizer so that `model.compile(optimizer=...)` trains sok_lite tables.

    apply_gradients() sends the (gradient, table) pairs of sok_lite tables to the fused
    row-wise kernels, driven by the wrapped optimizer's hyper-parameters (as
    sok_lite.OptimizerScope does), and every other pair to the wrapped optimizer. Only rows
    with a gradient change, their slots too. Learning rate and iterations are the wrapped
    optimizer's, so callbacks that set `model.optimizer.learning_rate` work; `variables` adds
    the tables' slots (created by build()) to the wrapped optimizer's, so model.save() and
    tf.train.Checkpoint keep them.

    Mixed precision: a keras.optimizers.LossScaleOptimizer goes around the wrapper (compile
    puts one there under the "mixed_float16" policy): the table gradients are unscaled before
    the row-wise update and stay tf.IndexedSlices, and a step with a non-finite gradient
    leaves tables and slots unchanged, as it does dense weights. It scales the loss by this
    wrapper's scale_loss before its own scale, so a subclass's own loss scaling (1 / num_ranks
    under Horovod, say) is kept. The wrapped optimizer's `loss_scale_factor` (static loss
    scaling) applies to table gradients too.

    Args:
      inner_optimizer: a keras.optimizers.Optimizer (SGD, Adam, AdamW, Adagrad, RMSprop, Ftrl,
        Adamax, Adadelta), or a sok_lite.OptimizerWrapper around one.
      name: the optimizer name; default "sok_lite_" + the wrapped optimizer's name.

    Raises:
      TypeError: if inner_optimizer is not a Keras 3 optimizer (a name such as "adam" or a
        config dict too: pass keras.optimizers.get("adam")).
      ValueError: if it uses gradient_accumulation_steps, which the row-wise path does not
        apply, or is a LossScaleOptimizer (that one goes around the wrapper instead).

    >>> import keras, sok_lite as sok
    >>> model = keras.Sequential([sok.keras.Embedding(100, 8), keras.layers.Dense(1)])
    >>> model.compile(optimizer=sok.keras.OptimizerWrapper(keras.optimizers.Adam(0.01)),
    ...               loss="mse")
    >>> round(float(model.optimizer.learning_rate), 6)
    0.01
    """

    def __init__(self, inner_optimizer: Optimizer, name: str | None = None) -> None:
        inner_optimizer = unwrap(inner_optimizer)  # already wrapped: wrap once
        if isinstance(inner_optimizer, (str, dict)):  # what keras.optimizers.get() takes
            raise TypeError(
                f"OptimizerWrapper wraps an optimizer object, got {inner_optimizer!r}: pass "
                f"keras.optimizers.get({inner_optimizer!r}) or an instance such as "
                "keras.optimizers.Adam()"
            )
        if not isinstance(inner_optimizer, keras.optimizers.Optimizer):
            raise TypeError(
                "OptimizerWrapper wraps a keras.optimizers.Optimizer, got "
                f"{type(inner_optimizer).__name__}"
            )
        if isinstance(inner_optimizer, keras.optimizers.LossScaleOptimizer):
            # Inside, its finite check and unscaling would see no table gradient, and compile
            # would add a second one around the wrapper under mixed_float16.
            raise ValueError(
                "wrap the LossScaleOptimizer around sok_lite.keras.OptimizerWrapper, not the "
                "other way: keras.optimizers.LossScaleOptimizer(OptimizerWrapper(optimizer)) "
                "(compile does so itself under the mixed_float16 policy)"
            )
        if getattr(inner_optimizer, "gradient_accumulation_steps", None):
            raise ValueError(
                "gradient_accumulation_steps of the wrapped optimizer is not applied to "
                "sok_lite tables; leave it unset"
            )
        super().__init__(learning_rate=0.0, name=name or f"sok_lite_{inner_optimizer.name}")
        self.inner_optimizer = inner_optimizer

    def build(self, variables: list[tf.Variable]) -> None:
        adapt_loss_scale_optimizer(self)  # when a LossScaleOptimizer is building this one
        # Keras builds the optimizer inside the first trace of the training step (fit without a
        # strategy): its variables are made outside that trace, which then runs once.
        with variables_made_now():
            self._build(variables)

    def _build(self, variables: list[tf.Variable]) -> None:
        tables, dense = filter_variables(variables)
        self.inner_optimizer.build(dense)
        # The row-wise slots of fixed-size tables are created now rather than on the first
        # step, so that `variables` (what model.save() stores) has the same length before and
        # after training, and tf.train.Checkpoint finds them here. Dynamic tables keep their
        # slots beside their rows.
        store = tf.Module()
        store.slots = []
        if tables:
            rule = rule_for(self.inner_optimizer)  # an unsupported optimizer fails here
            held = [
                shard.slot_variables(self.inner_optimizer, rule)
                for t in tables
                for shard in shards_of(t)  # one per replica of this process
            ]
            store.slots = [slots for slots in held if slots is not None]
        self._table_slots = store
        super().build(variables)

    def apply_gradients(
        self,
        grads_and_vars: Iterable[GradAndVar],
        experimental_aggregate_gradients: object = None,
    ) -> tf.Operation:
        # experimental_aggregate_gradients: accepted for code written against SOK; ignored.
        pairs = list(grads_and_vars)
        if not self.built:
            self.build([v for _, v in pairs])
        if not pairs:
            return self.iterations
        return apply_gradients(
            self.inner_optimizer,
            pairs,
            lambda opt, dense: type(opt).apply_gradients(opt, dense),
            is_table,
        )

    def apply(
        self,
        grads: Iterable[tf.Tensor | tf.IndexedSlices],
        trainable_variables: Iterable[tf.Variable] | None = None,
    ) -> tf.Operation:
        if trainable_variables is None:
            trainable_variables = built_variables(self)
        return self.apply_gradients(zip(grads, trainable_variables))

    @property
    def optimizer(self) -> Optimizer:
        """The wrapped optimizer, under the name sok_lite.OptimizerWrapper uses."""
        return self.inner_optimizer

    @property
    def iterations(self) -> tf.Variable:
        return self.inner_optimizer.iterations

    @property
    def learning_rate(self) -> tf.Variable:
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate: float | tf.Tensor) -> None:
        self.inner_optimizer.learning_rate = learning_rate

    @property
    def loss_scale_factor(self) -> float | None:
        """The wrapped optimizer's static loss scale: fit multiplies the loss by it and every
        gradient, of tables too, is divided by it before the update."""
        inner = vars(self).get("inner_optimizer")  # Keras' __init__ reads it before it is set
        return None if inner is None else inner.loss_scale_factor

    @loss_scale_factor.setter
    def loss_scale_factor(self, factor: float | None) -> None:
        # The wrapped optimizer's, as a LossScaleOptimizer expects when it turns it off.
        inner = vars(self).get("inner_optimizer")
        if inner is not None:
            inner.loss_scale_factor = factor

    def __setattr__(self, name: str, value: object) -> None:
        if name == "loss_scale_factor":
            # A LossScaleOptimizer being made around this wrapper turns it off (Keras skips
            # the setter when the value does not change, so this is where it always arrives).
            adapt_loss_scale_optimizer(self)
        super().__setattr__(name, value)

    @property
    def variables(self) -> list[tf.Variable]:
        """The wrapped optimizer's variables, then the slots of each table in build order."""
        table_slots = [s for slots in self._table_slots.slots for s in slots] if self.built else []
        variables: list[tf.Variable] = self.inner_optimizer.variables + table_slots
        return variables

    def scale_loss(self, loss: tf.Tensor) -> tf.Tensor:
        return self.inner_optimizer.scale_loss(loss)

    def finalize_variable_values(self, var_list: Iterable[tf.Variable]) -> None:
        self.inner_optimizer.finalize_variable_values([v for v in var_list if not is_table(v)])

    def get_config(self) -> dict[str, object]:
        return {
            "name": self.name,
            "inner_optimizer": keras.saving.serialize_keras_object(self.inner_optimizer),
        }

    @classmethod
    def from_config(
        cls, config: dict[str, object], custom_objects: dict[str, object] | None = None
    ) -> OptimizerWrapper:
        config = dict(config)
        inner = keras.saving.deserialize_keras_object(
            config.pop("inner_optimizer"), custom_objects=custom_objects
        )
        name = config.pop("name", None)
        if config or not (name is None or isinstance(name, str)):
            raise ValueError(
                f"OptimizerWrapper.from_config: a config of get_config's fields "
                f"(inner_optimizer, name), got also {config} and name {name!r}"
            )
        return cls(inner, name=name)
