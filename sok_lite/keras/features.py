"""Feature specs of sok_lite.keras.EmbeddingCollection, and the tables they imply."""

import dataclasses
import numbers
from collections.abc import Sequence
from typing import TypeAlias, TypeGuard

import keras
import tensorflow as tf

from sok_lite.lookup.sparse import COMBINERS
from sok_lite.tables import HASH_TABLE_FIELDS, TableSpec
from sok_lite.tables.initializers import computes_per_row
from sok_lite.tables.placement import Placement
from sok_lite.tables.storage import Disk, disk_of
from sok_lite.tables.table_dtypes import HALF_DTYPES

EVICT_POLICIES = ("lru", "lfu")
KEY_DTYPES = ("int32", "int64")
# Storage dtypes of a fixed-size table; a hash table stores all but float64.
STORAGE_DTYPES = ("float32", "float64", "bfloat16", "float16")
HASH_STORAGE_DTYPES = ("float32", "bfloat16", "float16")
# The hash-table settings and their defaults (TableSpec's): a fixed-size table takes none of them.
HASH_TABLE_DEFAULTS = {
    field.name: field.default
    for field in dataclasses.fields(TableSpec)
    if field.name in HASH_TABLE_FIELDS
}


# A table's initializer as a feature takes it: a Keras name, a number, a Keras config dict or a
# keras.initializers.Initializer.
InitializerLike: TypeAlias = str | float | dict[str, object] | keras.initializers.Initializer


def serialize_initializer(initializer: InitializerLike) -> str | dict[str, object]:
    """A name stays a name; an initializer object becomes its Keras config."""
    if isinstance(initializer, str):
        return initializer
    config: dict[str, object] = keras.initializers.serialize(keras.initializers.get(initializer))
    return config


def storage_config(storage: Disk | None) -> dict[str, object] | None:
    """A Disk as the plain dict {"path", "ram_budget"} that a config holds (None stays None)."""
    if storage is None:
        return None
    return {"path": storage.path, "ram_budget": storage.ram_budget}


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """One categorical feature: which table it reads and how its ids are combined.

    With `input_dim=None` the feature's table is a hash table (a sok_lite.DynamicVariable):
    any key of `key_dtype` is valid, negative ones included, and a row is created the first
    time its key is looked up.

    Args:
      name: the feature's key in the input and output dicts.
      input_dim: rows of the table (ids must be in [0, input_dim)); None: a hash table over
        raw integer keys.
      output_dim: columns of the table, the width of the output (required).
      combiner: "sum", "mean" or "sqrtn" over the ids of a sample.
      initializer: a Keras initializer (name, config dict or object) for the table. A hash
        table computes each new row from (key, seed): it takes RandomNormal, TruncatedNormal,
        RandomUniform, Zeros, Ones and Constant, a number, or SOK's "random".
      table: the table name; features with the same table name share one table (they must
        agree on every table field: input_dim, output_dim, initializer, mode, storage_dtype and
        the hash-table settings, storage included). Default: the feature name.
      hotness: the most ids a sample may have (a longer sample is an error); None: no limit.
      pad_value: for dense [batch, k] inputs, the id that marks an empty slot (dropped); None:
        every entry is an id. For a hash table the pad value is therefore not a usable key.
      mode: "distributed" or "localized:K", as sok_lite.Variable and DynamicVariable.
      capacity: hash tables only: the rows the table may hold over all ranks (None:
        unbounded); when full, lookups evict rows by evict_policy.
      evict_policy: hash tables only: "lru" (default) or "lfu".
      min_count: hash tables only: a key gets a stored, trainable row from its min_count-th
        lookup on (before that it reads the initializer's value).
      key_dtype: hash tables only: "int64" (default) or "int32", the dtype of the keys.
      storage: hash tables only: None (default: every row in RAM) or
        `sok.storage.Disk(path, ram_budget)` (or a dict {"path": ..., "ram_budget": ...}): each
        rank keeps at most ram_budget bytes of the table's rows in RAM and the rest in a file
        under `<path>/<table name>.rank<r>`, as sok_lite.DynamicVariable's `storage`. Excludes
        capacity. See docs/user_guide.md, "Tables larger than memory".
      storage_dtype: the dtype the table stores its rows in: "float32", "bfloat16" or
        "float16" (16 bits: half the memory; lookups, gradients and optimizer math stay
        float32, see docs/user_guide.md "16-bit tables"), or "float64" (fixed-size tables
        only). None (default): the layer's variable dtype, float32 under the default and the
        mixed_bfloat16 / mixed_float16 policies. The layer's output is its compute dtype
        whatever the storage.
      weight_feature: the key of the input dict entry that holds one float weight per id (as
        TF's weighted_categorical_column), laid out exactly like the ids: the same ragged or
        sparse structure, or the same dense [batch, k] shape (entries whose id is pad_value
        are dropped with their ids). The combiner weighs each row as
        tf.nn.embedding_lookup_sparse does ("sum": sum_j w_j * row_j). The weights get no
        gradient. None: every id weighs 1.

    Raises:
      ValueError: naming the feature, for an unknown combiner, mode, evict_policy,
        key_dtype or storage_dtype (float64 for a hash table), non-positive dimensions,
        capacity or min_count, hash-table settings on a fixed-size feature, a storage that is
        not a Disk (or its dict) or comes with capacity, an initializer a hash table cannot
        compute per key, or a weight_feature that is not a non-empty name other than the
        feature's.
    """

    name: str
    input_dim: int | None = None
    output_dim: int | None = None
    combiner: str = "sum"
    initializer: InitializerLike = "random_normal"
    table: str | None = None
    hotness: int | None = None
    pad_value: int | None = None
    mode: str = "distributed"
    capacity: int | None = None
    evict_policy: str = "lru"
    min_count: int = 1
    key_dtype: str = "int64"
    weight_feature: str | None = None
    storage_dtype: str | None = None
    storage: Disk | None = None

    def __post_init__(self) -> None:
        label = f"feature {self.name!r}"
        if self.combiner not in COMBINERS:
            raise ValueError(
                f"{label}: unknown combiner {self.combiner!r}, expected one of {COMBINERS}"
            )
        if not _is_int(self.output_dim) or self.output_dim < 1:
            raise ValueError(f"{label}: output_dim must be an int >= 1, got {self.output_dim!r}")
        if self.input_dim is not None and (not _is_int(self.input_dim) or self.input_dim < 1):
            raise ValueError(
                f"{label}: input_dim must be an int >= 1, or None for a hash table, got "
                f"{self.input_dim!r}"
            )
        Placement.parse(self.mode)
        self._check_weight_feature(label)
        # A tf.DType is accepted and kept by name, so that the config stays JSON.
        object.__setattr__(self, "key_dtype", _key_dtype_name(self.key_dtype, label))
        storage = _storage_dtype_name(self.storage_dtype, self.hashed, label)
        object.__setattr__(self, "storage_dtype", storage)
        # A config dict becomes a Disk, so that features sharing a table compare equal.
        object.__setattr__(self, "storage", disk_of(self.storage, label))
        if self.hashed:
            self._check_hash_table(label)
        else:
            self._refuse_hash_table_settings(label)

    def _check_weight_feature(self, label: str) -> None:
        if self.weight_feature is None:
            return
        if not isinstance(self.weight_feature, str) or not self.weight_feature:
            raise ValueError(
                f"{label}: weight_feature must be a non-empty input name or None, got "
                f"{self.weight_feature!r}"
            )
        if self.weight_feature == self.name:
            raise ValueError(f"{label}: weight_feature must name another input entry than the ids")

    def _check_hash_table(self, label: str) -> None:
        if self.capacity is not None and (not _is_int(self.capacity) or self.capacity < 1):
            raise ValueError(
                f"{label}: capacity must be an int >= 1 or None, got {self.capacity!r}"
            )
        if self.evict_policy not in EVICT_POLICIES:
            raise ValueError(
                f"{label}: evict_policy must be one of {EVICT_POLICIES}, got {self.evict_policy!r}"
            )
        if not _is_int(self.min_count) or self.min_count < 1:
            raise ValueError(f"{label}: min_count must be an int >= 1, got {self.min_count!r}")
        # DynamicVariable refuses this too, but only at build, naming the table.
        if self.storage is not None and self.capacity is not None:
            raise ValueError(
                f"{label}: capacity drops rows and storage=Disk keeps them; give one of them"
            )
        if not computes_per_row(self.initializer):
            raise ValueError(
                f"{label}: a hash table computes each new row from its key, which initializer "
                f"{self.initializer!r} cannot do; use RandomNormal, TruncatedNormal, "
                'RandomUniform, Zeros, Ones, Constant, a number or "random"'
            )

    def _refuse_hash_table_settings(self, label: str) -> None:
        given = [
            f"{field}={getattr(self, field)!r}"
            for field, default in HASH_TABLE_DEFAULTS.items()
            if getattr(self, field) != default
        ]
        if given:
            raise ValueError(
                f"{label}: {', '.join(given)} only apply to a hash table; give input_dim=None "
                f"for one (input_dim is {self.input_dim})"
            )

    @property
    def hashed(self) -> bool:
        """Whether the feature's table is a hash table (input_dim None)."""
        return self.input_dim is None

    @property
    def table_name(self) -> str:
        return self.table or self.name

    def table_spec(self, name: str | None = None) -> TableSpec:
        """The table the feature reads, named `name` (default: its table name): a hash table
        for input_dim None, else input_dim rows; storage_dtype None leaves the dtype to the
        layer."""
        assert self.output_dim is not None  # __post_init__ refuses None
        return TableSpec(
            self.input_dim,
            self.output_dim,
            kind="hash" if self.hashed else "static",
            dtype=self.storage_dtype,
            name=name or self.table_name,
            mode=self.mode,
            initializer=self.initializer,
            **{field: getattr(self, field) for field in HASH_TABLE_FIELDS},
        )

    def get_config(self) -> dict[str, object]:
        """A JSON-friendly dict that `FeatureSpec(**config)` turns back into this spec."""
        config = dataclasses.asdict(self)
        config["initializer"] = serialize_initializer(self.initializer)
        config["storage"] = storage_config(self.storage)
        return config

    @classmethod
    def coerce(cls, spec: object) -> "FeatureSpec":
        """A FeatureSpec from itself or from a dict of its fields (a FeatureSpec checks each).

        Raises:
          ValueError: for anything else, or a dict FeatureSpec refuses.
        """
        if isinstance(spec, cls):
            return spec
        if not isinstance(spec, dict):
            raise ValueError(f"a feature is a sok_lite.keras.FeatureSpec or a dict, got {spec!r}")
        return cls(**spec)


def _storage_dtype_name(storage_dtype: object, hashed: bool, label: str) -> str | None:
    """The storage dtype by name (None stays None: the layer's variable dtype)."""
    if storage_dtype is None:
        return None
    try:
        name: str = tf.as_dtype(storage_dtype).name
    except TypeError:
        name = repr(storage_dtype)
    allowed = HASH_STORAGE_DTYPES if hashed else STORAGE_DTYPES
    if name not in allowed:
        kind = "a hash table" if hashed else "a table"
        raise ValueError(f"{label}: storage_dtype of {kind} must be one of {allowed}, got {name}")
    return name


def table_dtype(
    spec: TableSpec, variable_dtype: tf.DType | str, compute_dtype: tf.DType | str
) -> tf.DType:
    """The dtype a table of `spec` is created in, for a layer of these dtypes.

    Raises:
      ValueError: naming the table, for a float64 table under a 16-bit compute dtype (a
        mixed_bfloat16 / mixed_float16 policy): its rows would be computed in 16 bits and
        stored in 64, which is a mistake rather than a choice.
    """
    dtype = tf.as_dtype(spec.dtype or variable_dtype)
    if dtype == tf.float64 and tf.as_dtype(compute_dtype) in HALF_DTYPES:
        raise ValueError(
            f"table {spec.name!r}: a float64 table under a {tf.as_dtype(compute_dtype).name} "
            "compute dtype (a mixed precision policy); store it in float32, bfloat16 or "
            "float16 (storage_dtype), or use a float64 policy"
        )
    return dtype


def _key_dtype_name(key_dtype: object, label: str) -> str:
    try:
        name: str | None = tf.as_dtype(key_dtype).name
    except TypeError:
        name = None
    if name is None or name not in KEY_DTYPES:
        raise ValueError(f"{label}: key_dtype must be one of {KEY_DTYPES}, got {key_dtype!r}")
    return name


def _initializer_identity(initializer: InitializerLike) -> str | dict[str, object]:
    """The initializer's config without the `shared_object_id` Keras adds when it serializes one
    object twice inside a saving scope (so that one object compares equal to itself)."""
    config = serialize_initializer(initializer)
    if isinstance(config, dict):
        config = {k: v for k, v in config.items() if k != "shared_object_id"}
    return config


def _same_table(a: FeatureSpec, b: FeatureSpec) -> bool:
    fields = ("input_dim", "output_dim", "mode", "storage_dtype", *HASH_TABLE_DEFAULTS)
    return all(getattr(a, f) == getattr(b, f) for f in fields) and (
        _initializer_identity(a.initializer) == _initializer_identity(b.initializer)
    )


def table_specs(features: Sequence[FeatureSpec]) -> list[TableSpec]:
    """The tables of `features`, in order of first use.

    Args:
      features: the feature specs of one collection.

    Returns:
      One TableSpec per distinct table name.

    Raises:
      ValueError: for duplicate feature names, or features sharing a table that disagree on
        any of its fields.
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
                "differ in input_dim, output_dim, initializer, mode, storage_dtype or the "
                f"hash-table settings ({', '.join(HASH_TABLE_DEFAULTS)})"
            )
    return [f.table_spec(name) for name, f in first_use.items()]


def check_weight_features(features: Sequence[FeatureSpec]) -> None:
    """Refuses a weight_feature that names a feature: one input entry cannot be both the ids
    of a feature and the weights of another.

    Raises:
      ValueError: naming the weighted feature and the entry.
    """
    names = {f.name for f in features}
    for f in features:
        if f.weight_feature in names:
            raise ValueError(
                f"feature {f.name!r}: weight_feature {f.weight_feature!r} is the name of a "
                "feature (its ids); weights need an input entry of their own"
            )
