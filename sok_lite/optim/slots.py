"""Optimizer slots of sok_lite tables: shaped and placed like the table's local shard; and
TableSlots, the OptimizerState through which tables reach them (registered with the tables)."""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

from sok_lite._errors import table_label
from sok_lite._tf_internals import VARIABLE_VALUE_KEY, ResourceVariable, Trackable, require
from sok_lite.ops.table_assign_ops import assign_into_huge_pages, assigns_into_huge_pages
from sok_lite.optim.optimizer_rules import is_legacy, rule_for, unwrap
from sok_lite.tables.initializers import RowInitializer
from sok_lite.tables.table_dtypes import row_dtype
from sok_lite.tables.table_kind import (
    Optimizer,
    OptimizerState,
    RowRule,
    TableKind,
    register_optimizer_state,
)

# optimizer -> {table ref -> {slot name -> slot variable}}
_SLOTS: weakref.WeakKeyDictionary[Optimizer, dict[object, dict[str, tf.Variable]]] = (
    weakref.WeakKeyDictionary()
)
# optimizer -> {table ref -> int64 [local rows]: the optimizer step that last changed each row}
_UPDATED: weakref.WeakKeyDictionary[Optimizer, dict[object, tf.Variable]] = (
    weakref.WeakKeyDictionary()
)


def _filled_rows(var: tf.Variable, dtype: tf.DType, fill: float) -> tuple[tf.Tensor, bool]:
    """The initial value of a slot of `var` (every element `fill`), and whether its buffer was
    advised for huge pages.

    A static table's float slots come from the row initializer's op, which advises huge pages
    for a large buffer before writing it (the slot variable adopts the buffer); the op takes
    its constant as a float32 attribute, so float64 slots go through it only for values exact
    in float32.
    """
    exact = dtype == tf.float32 or (dtype == tf.float64 and float(np.float32(fill)) == fill)
    if getattr(var, "kind", None) == "static" and exact:
        rows, dim = (int(n) for n in var.shape)
        init = RowInitializer("constant", a=float(fill))
        return init(tf.range(rows, dtype=tf.int64), dim, dtype), True
    return tf.fill(tf.shape(var), tf.constant(fill, dtype)), False


def _new_slot(var: tf.Variable, name: str, fill: float) -> tf.Variable:
    base = table_label(var)
    # float32 beside a 16-bit table unless it asks for bfloat16 slots (Variable(slot_dtype=)).
    dtype = getattr(var, "slot_dtype", None) or row_dtype(var.dtype)
    value, advised = _filled_rows(var, dtype, fill)
    if not isinstance(var, TableKind):
        return ResourceVariable(value, trainable=False, name=f"{base}/{name}")
    slot = var.slot_variable(value, f"{base}/{name}")
    if not advised and assigns_into_huge_pages(slot, value):
        assign_into_huge_pages(slot, value)  # bfloat16 slots: tf.fill wrote an unadvised buffer
    return slot


class _Float32Slot(Trackable):
    """A bfloat16 slot as tf.train.Checkpoint sees it: saved as float32 under a variable's key,
    so checkpoints of bfloat16 and float32 slots load into each other (widening is exact; a
    float32 value rounds to nearest into bfloat16). The slot variable keeps its dtype."""

    def __init__(self, slot: tf.Variable) -> None:
        self._slot = slot  # a plain Trackable does not track it as a dependency of its own

    def _serialize_to_tensors(self) -> dict[str, tf.Tensor]:
        return {VARIABLE_VALUE_KEY: tf.cast(self._slot, tf.float32)}

    def _restore_from_tensors(self, restored_tensors: dict[str, tf.Tensor]) -> tf.Operation:
        value = restored_tensors[VARIABLE_VALUE_KEY]
        return self._slot.assign(tf.cast(value, self._slot.dtype))


def _checkpoint_store(optimizer: Optimizer) -> dict[str, object]:
    """A dict tracked by `optimizer`, so that tf.train.Checkpoint(optimizer=...) saves the slots.

    Slots are keyed "<table name>/<slot name>"; slots created after a restore are restored as
    they are created (TF's deferred restoration).
    """
    store = getattr(optimizer, "_sok_lite_slots", None)
    if store is None:
        store = tf.Module(name="sok_lite_slots")
        store.slots = {}
        try:
            optimizer._sok_lite_slots = store
        except (AttributeError, TypeError):  # an optimizer that refuses new attributes
            return {}
    slots: dict[str, object] = store.slots
    return slots


def get_slots(
    optimizer: Optimizer, var: tf.Variable, specs: Sequence[tuple[str, float]]
) -> list[tf.Variable]:
    """The slots of `var` under `optimizer`, created on first use (outside any tf.function).

    specs: (name, initial value) pairs, in the order the kernel expects.
    """
    per_var = _SLOTS.setdefault(optimizer, {}).setdefault(var.ref(), {})
    missing = [(n, f) for n, f in specs if n not in per_var]
    if missing:
        store = _checkpoint_store(optimizer)
        # On the shard's device (one per replica under MirroredStrategy), outside any function.
        with tf.init_scope(), tf.device(var.device):
            for name, fill in missing:
                per_var[name] = _new_slot(var, name, fill)
                key = f"{table_label(var)}/{name}"
                while key in store:  # tables sharing a name: keep both, in creation order
                    key += "_"
                slot = per_var[name]
                store[key] = _Float32Slot(slot) if slot.dtype == tf.bfloat16 else slot
    return [per_var[name] for name, _ in specs]


def opt_slots(optimizer: Optimizer, var: tf.Variable) -> dict[str, tf.Variable]:
    """The slots `optimizer` (or a sok_lite wrapper of it) keeps for sok_lite table `var`, by
    name (empty before first use).

    >>> import keras, numpy as np, sok_lite as sok
    >>> sok.opt_slots(keras.optimizers.Adam(), sok.Variable(np.zeros([2, 2])))
    {}
    """
    optimizer = unwrap(optimizer)
    return dict(_SLOTS.get(optimizer, {}).get(var.ref(), {}))


def update_tracker(optimizer: Optimizer, var: tf.Variable) -> tf.Variable:
    """The int64 [local rows] variable holding, per row of static table `var`, the last
    optimizer step that changed it (-1: none); the row-wise update op writes it."""
    per_var = _UPDATED.setdefault(optimizer, {})
    if var.ref() not in per_var:
        # A plain resource variable: it follows this shard, whatever strategy is in scope.
        with tf.init_scope(), tf.device(var.device):
            value = tf.fill([int(var.shape[0])], tf.constant(-1, tf.int64))
            tracker = ResourceVariable(value, trainable=False)
            if assigns_into_huge_pages(tracker, value):  # written at a random row per update
                assign_into_huge_pages(tracker, value)
            per_var[var.ref()] = tracker
    return per_var[var.ref()]


def updated_since(optimizer: Optimizer, var: tf.Variable, since_step: int) -> tf.Tensor:
    """Local rows of static table `var` that an optimizer step after `since_step` changed."""
    optimizer = unwrap(optimizer)
    tracker = _UPDATED.get(optimizer, {}).get(var.ref())
    if tracker is None:
        return tf.zeros([0], tf.int64)
    return tf.cast(tf.where(tracker > since_step)[:, 0], tf.int64)


def stepped_row_wise(optimizer: Optimizer, var: tf.Variable) -> bool:
    """Whether the row-wise kernels have updated static table `var` under `optimizer`."""
    return var.ref() in _UPDATED.get(unwrap(optimizer), {})


# What keras_slots and knows_variable read of a Keras 3 optimizer (sok_lite._tf_internals.FEATURES).
_KERAS_OPTIMIZERS = "Keras optimizers applying tables"


def keras_slots(optimizer: Optimizer, var: tf.Variable, rule: RowRule) -> list[tf.Variable] | None:
    """The slot variables Keras itself keeps for `var` (those it updates when it applies the
    table outside OptimizerScope), in the order of rule.slots; None if it keeps none."""
    optimizer = unwrap(optimizer)
    if not rule.keras_slots:
        return None
    if is_legacy(optimizer):  # tf_keras legacy: slots by name, created with the variable
        try:
            return [optimizer.get_slot(var, name) for name in rule.keras_slots]
        except (KeyError, ValueError):  # never applied this table itself
            return None
    if not getattr(optimizer, "built", False):
        return None
    require(_KERAS_OPTIMIZERS)
    try:
        index = optimizer._get_variable_index(var)
        return [getattr(optimizer, name)[index] for name in rule.keras_slots]
    except (AttributeError, KeyError, IndexError, TypeError):  # not built with this table
        return None


def knows_variable(optimizer: Optimizer, var: tf.Variable) -> bool:
    """Whether Keras' own optimizer was built with `var` (a table: and so may have applied it)."""
    optimizer = unwrap(optimizer)
    if is_legacy(optimizer):  # slots of the variables it applied, by variable key
        from tf_keras.src.optimizers.legacy.optimizer_v2 import _var_key

        return bool(optimizer._slots.get(_var_key(var)))
    require(_KERAS_OPTIMIZERS)
    try:
        optimizer._get_variable_index(var)
        return True
    except (AttributeError, KeyError, TypeError):
        return False


class TableSlots(OptimizerState):
    """An optimizer's OptimizerState: its row-wise rule, the slots this module keeps for its
    static tables, and Keras' own slots of a table it applied by itself (outside
    OptimizerScope), whose state lives there."""

    def __init__(self, optimizer: Optimizer, rule: RowRule | None = None) -> None:
        self._optimizer = optimizer
        self._rule = rule_for(optimizer) if rule is None else rule

    @property
    def kernel(self) -> str:
        return self._rule.kind

    @property
    def slot_fills(self) -> list[float]:
        return [fill for _, fill in self._rule.slots]

    def slots(self, table: TableKind) -> list[tf.Variable]:
        return get_slots(self._optimizer, table, self._rule.slots)

    def update_tracker(self, table: TableKind) -> tf.Variable:
        return update_tracker(self._optimizer, table)

    def changed_rows(self, table: TableKind, since_step: int) -> tf.Tensor:
        optimizer = self._optimizer
        if (
            not stepped_row_wise(optimizer, table)
            and knows_variable(optimizer, table)
            and int(optimizer.iterations.numpy()) > since_step
        ):
            # Keras applied this table itself: which rows changed is not recorded.
            raise ValueError(
                f"table '{table_label(table)}' was updated by Keras outside "
                "sok_lite.OptimizerScope: its changed rows are unknown; save it with a full "
                "dump (no since_step), or apply it under OptimizerScope"
            )
        return updated_since(optimizer, table, since_step)

    def saved_slots(self, table: TableKind) -> list[tf.Variable]:
        """sok_lite's slots once the row-wise kernels have stepped the table. Otherwise, if
        Keras was built with the table, Keras' own slots: a table applied by Keras itself
        (outside OptimizerScope) has its state there, and sok_lite's slots would only hold
        their fills."""
        if not stepped_row_wise(self._optimizer, table):
            held = keras_slots(self._optimizer, table, self._rule)
            if held is not None:
                return [s.value if isinstance(s, keras.Variable) else s for s in held]
        return self.slots(table)

    def restored_slots(self, table: TableKind) -> list[list[tf.Variable]]:
        """sok_lite's slot, and Keras' own where Keras was built with the table (training
        that goes on outside OptimizerScope reads those)."""
        slots = self.slots(table)
        held = keras_slots(self._optimizer, table, self._rule) or [None] * len(slots)
        return [[v for v in (slot, own) if v is not None] for slot, own in zip(slots, held)]


register_optimizer_state(TableSlots)
