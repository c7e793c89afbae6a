"""Feature specs of sok_lite.keras.EmbeddingCollection, and the tables they imply."""

import dataclasses
from collections.abc import Sequence
from typing import Any

import keras

from sok_lite.lookup import COMBINERS
from sok_lite.placement import Placement


def serialize_initializer(initializer) -> str | dict:
    """A name stays a name; an initializer object becomes its Keras config."""
    if isinstance(initializer, str):
        return initializer
    return keras.initializers.serialize(keras.initializers.get(initializer))


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """One categorical feature: which table it reads and how its ids are combined.

    Args:
      name: the feature's key in the input and output dicts.
      input_dim: rows of the table (ids must be in [0, input_dim)).
      output_dim: columns of the table, the width of the output.
      combiner: "sum", "mean" or "sqrtn" over the ids of a sample.
      initializer: a Keras initializer (name, config dict or object) for the table.
      table: the table name; features with the same table name share one table (they must
        agree on input_dim, output_dim, initializer and mode). Default: the feature name.
      hotness: the most ids a sample may have (a longer sample is an error); None: no limit.
      pad_value: for dense [batch, k] inputs, the id that marks an empty slot (dropped); None:
        every entry is an id.
      mode: "distributed" or "localized:K", as sok_lite.Variable.

    Raises:
      ValueError: for an unknown combiner or mode, or non-positive dimensions.
    """

    name: str
    input_dim: int
    output_dim: int
    combiner: str = "sum"
    initializer: Any = "random_normal"
    table: str | None = None
    hotness: int | None = None
    pad_value: int | None = None
    mode: str = "distributed"

    def __post_init__(self):
        if self.combiner not in COMBINERS:
            raise ValueError(
                f"feature {self.name!r}: unknown combiner {self.combiner!r}, expected one of "
                f"{COMBINERS}"
            )
        if self.input_dim < 1 or self.output_dim < 1:
            raise ValueError(
                f"feature {self.name!r}: input_dim and output_dim must be >= 1, got "
                f"{self.input_dim} and {self.output_dim}"
            )
        Placement.parse(self.mode)

    @property
    def table_name(self) -> str:
        return self.table or self.name

    def get_config(self) -> dict:
        """A JSON-friendly dict that `FeatureSpec(**config)` turns back into this spec."""
        config = dataclasses.asdict(self)
        config["initializer"] = serialize_initializer(self.initializer)
        return config

    @classmethod
    def coerce(cls, spec: "FeatureSpec | dict") -> "FeatureSpec":
        """A FeatureSpec from itself or from a dict of its fields."""
        return spec if isinstance(spec, cls) else cls(**spec)


@dataclasses.dataclass(frozen=True)
class TableSpec:
    """One table of a collection, as its features define it."""

    name: str
    input_dim: int
    output_dim: int
    initializer: Any
    mode: str


def _same_table(a: FeatureSpec, b: FeatureSpec) -> bool:
    return (a.input_dim, a.output_dim, a.mode) == (b.input_dim, b.output_dim, b.mode) and (
        serialize_initializer(a.initializer) == serialize_initializer(b.initializer)
    )


def table_specs(features: Sequence[FeatureSpec]) -> list[TableSpec]:
    """The tables of `features`, in order of first use.

    Args:
      features: the feature specs of one collection.

    Returns:
      One TableSpec per distinct table name.

    Raises:
      ValueError: for duplicate feature names, or features sharing a table that disagree on its
        shape, initializer or mode.
    """
    names = [f.name for f in features]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate feature names: {duplicates}")
    first_use: dict[str, FeatureSpec] = {}
    for f in features:
        owner = first_use.setdefault(f.table_name, f)
        if not _same_table(owner, f):
            raise ValueError(
                f"features {owner.name!r} and {f.name!r} share table {f.table_name!r} but "
                "differ in input_dim, output_dim, initializer or mode"
            )
    return [
        TableSpec(name, f.input_dim, f.output_dim, f.initializer, f.mode)
        for name, f in first_use.items()
    ]
