"""Row initializers whose values depend only on (seed, row id, column).

A table built from the same initializer and seed therefore holds the same global values on any
number of ranks, and no rank ever materializes rows it does not own. Keras' RandomNormal,
TruncatedNormal, RandomUniform, Zeros, Ones and Constant (or their names) are translated; the
numbers differ from Keras' own streams but follow the same distributions. Numbers (Python or
NumPy scalars) and SOK's initializer strings ("13", "random") are accepted too.
"""

import dataclasses
import itertools
import numbers

import keras
import numpy as np
import tensorflow as tf

from sok_lite.ops.op_inputs import run_op

# Variables created without an explicit seed get 1, 2, 3, ... in creation order: every rank
# creates its variables in the same order, so they agree without communicating.
_default_seeds = itertools.count(1)


@dataclasses.dataclass(frozen=True)
class RowInitializer:
    """kind: random_normal | truncated_normal | random_uniform | constant; a, b as in the op."""

    kind: str
    a: float = 0.0
    b: float = 1.0
    seed: int = 0

    def __call__(self, row_ids: tf.Tensor, dim: int, dtype: tf.DType) -> tf.Tensor:
        """The initial [len(row_ids), dim] rows of the given int64 row ids (or keys)."""
        # The op's attributes are the fields: kind, a, b, seed.
        return run_op(
            "init_rows",
            dataclasses.asdict(self),
            row_ids=tf.cast(row_ids, tf.int64),
            dtype=dtype,
            dim=dim,
        )


def _seed(config: dict) -> int:
    seed = config.get("seed")
    return int(seed) if isinstance(seed, int) else next(_default_seeds)


# SOK's "random": the default of its "hbm" tables, uniform in [-0.05, 0.05].
SOK_RANDOM = ("random_uniform", -0.05, 0.05)


def _is_number(value) -> bool:
    """A Python or NumPy real number (np.int64, np.float32, ...), not a bool."""
    if isinstance(value, (bool, np.bool_)):
        return False
    return isinstance(value, (numbers.Real, np.integer, np.floating))


def _from_string(name: str) -> RowInitializer | None:
    """SOK's initializer strings: "random" and numbers ("13", "-0.5"); None for other names."""
    if name == "random":
        kind, a, b = SOK_RANDOM
        return RowInitializer(kind, a, b, next(_default_seeds))
    try:
        return RowInitializer("constant", a=float(name))
    except ValueError:
        return None


# The Keras initializers that row_initializer translates.
_PER_ROW_KERAS = (
    keras.initializers.Zeros,
    keras.initializers.Ones,
    keras.initializers.Constant,
    keras.initializers.TruncatedNormal,
    keras.initializers.RandomNormal,
    keras.initializers.RandomUniform,
)


def computes_per_row(initializer) -> bool:
    """Whether row_initializer translates `initializer`, asked without taking a default seed.

    Args:
      initializer: as row_initializer takes it, or a Keras config dict.

    Raises:
      ValueError: a string or dict that names no initializer.
    """
    if _is_number(initializer):
        return True
    if isinstance(initializer, str):
        if initializer == "random":
            return True
        try:
            float(initializer)
            return True
        except ValueError:
            pass
    if isinstance(initializer, (str, dict)):
        initializer = keras.initializers.get(initializer)
    return isinstance(initializer, _PER_ROW_KERAS)


def row_initializer(initializer) -> RowInitializer | None:
    """Translates an initializer into per-row form; None if it cannot be.

    Args:
      initializer: a Keras initializer (object or name such as "random_normal" or "zeros"), a
        number (Python or NumPy scalar: a constant), or one of SOK's strings: a number such as
        "13" (a constant) or "random" (uniform in [-0.05, 0.05], SOK's default).

    Returns:
      The RowInitializer, or None for an initializer that cannot be computed per row (such as
      an arbitrary callable).

    Raises:
      ValueError: a string that names no initializer.
    """
    if _is_number(initializer):
        return RowInitializer("constant", a=float(initializer))
    if isinstance(initializer, str):
        translated = _from_string(initializer)
        if translated is not None:
            return translated
        initializer = keras.initializers.get(initializer)
    config = initializer.get_config() if hasattr(initializer, "get_config") else {}
    if isinstance(initializer, keras.initializers.Zeros):
        return RowInitializer("constant", a=0.0)
    if isinstance(initializer, keras.initializers.Ones):
        return RowInitializer("constant", a=1.0)
    if isinstance(initializer, keras.initializers.Constant):
        return RowInitializer("constant", a=float(config["value"]))
    if isinstance(initializer, keras.initializers.TruncatedNormal):
        return RowInitializer("truncated_normal", config["mean"], config["stddev"], _seed(config))
    if isinstance(initializer, keras.initializers.RandomNormal):
        return RowInitializer("random_normal", config["mean"], config["stddev"], _seed(config))
    if isinstance(initializer, keras.initializers.RandomUniform):
        return RowInitializer("random_uniform", config["minval"], config["maxval"], _seed(config))
    return None
