"""Keras 3 layers over sok_lite tables: Embedding (one feature) and EmbeddingCollection (many).

Both create their tables in build(), as sok_lite.Variable (input_dim given) or
sok_lite.DynamicVariable (input_dim None: a hash table over raw keys), list them among the
layer's weights (so model.trainable_variables, save_weights(), model.save() and
tf.train.Checkpoint see them) and look all of their features up, with the per-id weights of
weighted features, in one sok_lite.lookup_sparse call.
"""

from collections.abc import Mapping, MutableMapping, Sequence
from typing import TypeAlias

import keras
import tensorflow as tf

from sok_lite import comm
from sok_lite._keras_internals import in_symbolic_build, set_trainable, track_table
from sok_lite.comm.strategy import StrategyCommunicator, in_replica_context
from sok_lite.compat.sok2_dynamic import DynamicVariable
from sok_lite.keras.features import (
    FeatureSpec,
    check_weight_features,
    serialize_initializer,
    storage_config,
    table_dtype,
    table_specs,
)
from sok_lite.keras.inputs import (
    as_id_lists,
    as_weighted_id_lists,
    check_weight_spec,
    one_id_a_sample,
)
from sok_lite.keras.tables import (
    check_weight,
    create_table,
    hash_table_names,
    load_weight,
    save_weight,
    stored_values,
)
from sok_lite.lookup.sparse import lookup_sparse
from sok_lite.tables import TableSpec
from sok_lite.tables.storage import Disk, disk_of
from sok_lite.tables.variable import Variable

# A feature's ids or per-id weights: a tf.Tensor, tf.RaggedTensor or tf.SparseTensor (or, while
# Keras builds the model, a keras.KerasTensor).
Ids: TypeAlias = tf.Tensor | tf.RaggedTensor | tf.SparseTensor | keras.KerasTensor
# What Keras saves a layer's weights into and loads them from (save_own_variables).
WeightStore: TypeAlias = MutableMapping[str, object]


class _TableLayer(keras.layers.Layer):
    """What both layers share: table creation and tracking, freezing, no XLA."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        # Our ops have no XLA kernels: keep Keras' jit_compile="auto" from choosing XLA.
        self.supports_jit = False

    def _create_table(self, spec: TableSpec, name: str) -> Variable | DynamicVariable:
        # build() may run while Keras traces a function; the table must outlive that graph.
        with tf.init_scope():
            dtype = table_dtype(spec, self.variable_dtype, self.compute_dtype)
            table: Variable | DynamicVariable = create_table(spec, name, dtype, self.trainable)
        track_table(self, table)
        return table

    # Keras saves each weight as one dense array; a hash table has none (see keras/tables.py).
    def save_own_variables(self, store: WeightStore) -> None:
        for i, weight in enumerate(self.weights):
            save_weight(store, str(i), weight)

    def load_own_variables(self, store: WeightStore) -> None:
        # Every weight is checked before any changes: a bad file leaves the layer as it was.
        for i, weight in enumerate(self.weights):
            check_weight(store, str(i), weight, f"layer {self.name!r}")
        for i, weight in enumerate(self.weights):
            load_weight(store, str(i), weight, f"layer {self.name!r}")

    # A hash table has no fixed shape: Keras' own count multiplies each weight's shape.
    def count_params(self) -> int:
        """The number of values in the layer's tables; a hash table counts the rows stored on
        this process times its dimension, a number that grows as keys arrive."""
        if not self.built:
            count: int = super().count_params()  # Keras' error for an unbuilt layer
            return count
        return sum(stored_values(weight) for weight in self.weights)

    # Keras' contract is one dense array per weight, which a hash table does not have.
    def get_weights(self) -> list[object]:
        self._refuse_hash_tables("get_weights")
        weights: list[object] = super().get_weights()
        return weights

    def set_weights(self, weights: Sequence[object]) -> None:
        self._refuse_hash_tables("set_weights")
        super().set_weights(weights)

    def _refuse_hash_tables(self, method: str) -> None:
        hashed = hash_table_names(self.weights)
        if hashed:
            raise ValueError(
                f"layer {self.name!r}: {method}() takes one array per weight, and hash tables "
                f"{hashed} have none (they hold the keys seen so far). Save and restore the "
                "layer with model.save_weights() / load_weights(), model.save(), "
                "tf.train.Checkpoint or sok.dump / sok.load; read a table's rows with "
                "table.export()"
            )

    def _lookup(
        self,
        tables: Sequence[Variable | DynamicVariable],
        features: Sequence[FeatureSpec],
        inputs: Sequence[Ids],
        weights: Sequence[Ids | None] | None = None,
    ) -> list[tf.Tensor]:
        """inputs: the ids per feature; weights: None, or per feature None or its per-id
        weights."""
        weights = [None] * len(features) if weights is None else weights
        lists = [self._id_lists(x, w, f, one_id=True) for x, w, f in zip(inputs, weights, features)]
        ids = [x for x, _ in lists]
        if _shape_trace_without_replica():
            return [self._placeholder_output(x, f) for x, f in zip(ids, features)]
        outputs = lookup_sparse(
            list(tables),
            ids,
            sp_weights=[w for _, w in lists],
            hotness=[f.hotness for f in features],
            combiners=[f.combiner for f in features],
        )
        return [tf.cast(out, self.compute_dtype) for out in outputs]

    def _id_lists(
        self, inputs: Ids, weights: Ids | None, feature: FeatureSpec, one_id: bool = False
    ) -> tuple[Ids, tf.RaggedTensor | None]:
        """(ids, weights or None) of one feature for lookup_sparse; one_id: see one_id_a_sample."""
        label = self._label(feature)
        if weights is None:
            one = one_id_a_sample(inputs, feature.pad_value, label) if one_id else None
            return (as_id_lists(inputs, feature.pad_value, label) if one is None else one), None
        return as_weighted_id_lists(inputs, weights, feature.pad_value, label)

    def _label(self, feature: FeatureSpec) -> str:
        return f"layer {self.name!r}, feature {feature.name!r}"

    def _placeholder_output(self, ids: Ids, feature: FeatureSpec) -> tf.Tensor:
        if isinstance(ids, tf.SparseTensor):
            rows = ids.dense_shape[0]
        elif isinstance(ids, tf.RaggedTensor):
            rows = ids.nrows()
        else:  # dense ids of one id a sample
            rows = tf.shape(ids, out_type=tf.int64)[0]
        if ids.shape[0] is not None:
            rows = ids.shape[0]
        return tf.zeros(tf.stack([rows, feature.output_dim]), self.compute_dtype)

    def _output_spec(
        self, inputs: Ids, weights: Ids | None, feature: FeatureSpec
    ) -> keras.KerasTensor:
        _refuse_composite_input_under_replicas(inputs, self._label(feature))
        if weights is not None:
            check_weight_spec(inputs, weights, self._label(feature))
        return keras.KerasTensor((inputs.shape[0], feature.output_dim), dtype=self.compute_dtype)

    @property
    def trainable(self) -> bool:
        return self._trainable

    @trainable.setter
    def trainable(self, value: bool) -> None:
        # Keras' own setter assigns `trainable` on each weight, which TF variables refuse.
        self._trainable = bool(value)
        weights = getattr(self, "_trainable_variables", [])
        weights = weights + getattr(self, "_non_trainable_variables", [])
        for weight in weights:
            if isinstance(weight, keras.Variable):
                weight.trainable = self._trainable
            else:
                set_trainable(weight, self._trainable)


def _refuse_composite_input_under_replicas(inputs: Ids, label: str) -> None:
    """A model built on a ragged or sparse keras.Input under a strategy with several replicas
    cannot be trained by `fit`: Keras reduces a distributed input batch over the replicas to
    build the model, and tf.distribute cannot reduce composite tensors ("'RaggedTensor' object
    has no attribute 'device'"). Say so when the model is built, and what to feed instead."""
    kind = "ragged" if getattr(inputs, "ragged", False) else None
    kind = "sparse" if getattr(inputs, "sparse", False) else kind
    if kind is None or not tf.distribute.has_strategy():
        return
    strategy = tf.distribute.get_strategy()
    if strategy.num_replicas_in_sync < 2:
        return
    raise ValueError(
        f"{label}: a {kind} keras.Input cannot be fed to model.fit under "
        f"{type(strategy).__name__} with {strategy.num_replicas_in_sync} replicas "
        "(tf.distribute cannot reduce RaggedTensor/SparseTensor batches). Feed dense "
        "[batch, hotness] ids padded with -1 instead: keras.Input(shape=(hotness,), "
        'dtype="int64") and the layer\'s pad_value=-1 (see docs/distributed.md)'
    )


def _shape_trace_without_replica() -> bool:
    """Keras infers output shapes by tracing the model in cross-replica context (fit under a
    strategy): no replica runs there, so no rank can take part in the exchange (and a table
    with one shard per replica has no shard to read); the lookup is skipped."""
    communicator = comm.current()
    return (
        isinstance(communicator, StrategyCommunicator)
        and communicator.num_ranks > 1
        and not in_replica_context()
        and in_symbolic_build()
    )


@keras.saving.register_keras_serializable(package="sok_lite")
class Embedding(_TableLayer):
    """One sok_lite table, looked up and combined per sample: [batch, ids] -> [batch, output_dim].

    Args:
      input_dim: rows of the table; ids must be in [0, input_dim). None: the table is a hash
        table (a sok_lite.DynamicVariable) over raw integer keys, a row per key seen.
      output_dim: columns of the table, the width of the output (required).
      combiner: "sum", "mean" or "sqrtn" over the ids of a sample (no ids: a row of zeros).
      initializer: a Keras initializer (name, config dict or object). RandomNormal,
        TruncatedNormal, RandomUniform, Zeros, Ones and Constant give the same table on any
        number of ranks (see sok_lite.Variable); a hash table takes only these (or a number,
        or "random").
      mode: "distributed" or "localized:K", as sok_lite.Variable.
      hotness: the most ids a sample may have (a longer sample is an error); None: no limit.
      pad_value: for dense inputs, the id that marks an empty slot: entries equal to it are
        dropped. None (the default): every entry of a dense input is an id.
      capacity, evict_policy, min_count, key_dtype: hash tables only, as in
        sok_lite.keras.FeatureSpec (and sok_lite.DynamicVariable).
      storage_dtype: the table's storage dtype, as in sok_lite.keras.FeatureSpec (None: the
        layer's variable dtype).
      storage: hash tables only: None (every row in RAM) or sok_lite.storage.Disk(path,
        ram_budget) (or its dict), as in sok_lite.keras.FeatureSpec. The tier directory is
        `<path>/embeddings.rank<r>` (the table's name), suffixed .1, .2, ... for further
        tables of that name in the process.
      weighted: if True, the layer is called on (ids, weights): one float weight per id, laid
        out like the ids (as FeatureSpec's weight_feature).
      **kwargs: keras.layers.Layer arguments (name, trainable, dtype).

    Call args:
      inputs: a tf.RaggedTensor or tf.SparseTensor [batch, None] of int32/int64 ids, or a dense
        integer tensor [batch, k] (filtered by pad_value) or [batch]. A weighted layer takes a
        tuple (ids, weights), the weights of the same kind and layout as the ids (entries whose
        id is pad_value are dropped with their ids); they get no gradient.

    Returns:
      A [batch, output_dim] tensor of the layer's compute dtype.

    Raises:
      ValueError: for a bad combiner, mode, dimension, storage dtype or hash-table setting, a
        float64 table under a 16-bit compute policy (at build), non-integer ids,
        or (weighted) an input that is not (ids, weights), non-float weights or weights laid
        out unlike the ids.
      tf.errors.InvalidArgumentError: for an id outside [0, input_dim), a sample longer than
        hotness, or weights whose row lengths differ from the ids' when the batch runs.

    >>> import tensorflow as tf, sok_lite as sok
    >>> layer = sok.keras.Embedding(10, 4, combiner="mean", pad_value=-1)
    >>> layer(tf.constant([[1, 2, -1], [3, -1, -1]])).shape
    TensorShape([2, 4])
    >>> hashed = sok.keras.Embedding(output_dim=4, capacity=1000)  # any int64 key
    >>> hashed(tf.constant([[2**40, -7]], tf.int64)).shape, type(hashed.embeddings).__name__
    (TensorShape([1, 4]), 'DynamicVariable')
    >>> linear = sok.keras.Embedding(10, 1, initializer="ones", weighted=True)
    >>> ids, values = tf.ragged.constant([[1, 2], [3]]), tf.ragged.constant([[0.5, 2.0], [1.5]])
    >>> linear((ids, values)).numpy().tolist()  # per sample: sum of value * row
    [[2.5], [1.5]]
    """

    def __init__(
        self,
        input_dim: int | None = None,
        output_dim: int | None = None,
        *,
        combiner: str = "sum",
        initializer: str | dict[str, object] | keras.initializers.Initializer = "random_normal",
        mode: str = "distributed",
        hotness: int | None = None,
        pad_value: int | None = None,
        capacity: int | None = None,
        evict_policy: str = "lru",
        min_count: int = 1,
        key_dtype: str = "int64",
        storage_dtype: str | None = None,
        storage: Disk | dict[str, object] | None = None,
        weighted: bool = False,
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)
        self.weighted = bool(weighted)
        self.feature = FeatureSpec(
            name=self.name,
            input_dim=input_dim,
            output_dim=output_dim,
            combiner=combiner,
            initializer=initializer,
            hotness=hotness,
            pad_value=pad_value,
            mode=mode,
            capacity=capacity,
            evict_policy=evict_policy,
            min_count=min_count,
            key_dtype=key_dtype,
            storage_dtype=storage_dtype,
            storage=disk_of(storage, f"feature {self.name!r}"),
        )

    input_dim = property(lambda self: self.feature.input_dim)
    output_dim = property(lambda self: self.feature.output_dim)
    combiner = property(lambda self: self.feature.combiner)
    initializer = property(lambda self: self.feature.initializer)
    mode = property(lambda self: self.feature.mode)
    hotness = property(lambda self: self.feature.hotness)
    pad_value = property(lambda self: self.feature.pad_value)
    capacity = property(lambda self: self.feature.capacity)
    evict_policy = property(lambda self: self.feature.evict_policy)
    min_count = property(lambda self: self.feature.min_count)
    key_dtype = property(lambda self: self.feature.key_dtype)
    storage_dtype = property(lambda self: self.feature.storage_dtype)
    storage = property(lambda self: self.feature.storage)

    def build(self, input_shape: object = None) -> None:
        self.embeddings = self._create_table(self.feature.table_spec(), "embeddings")

    def call(self, inputs: Ids | tuple[Ids, Ids]) -> tf.Tensor:
        ids, weights = self._ids_and_weights(inputs)
        return self._lookup([self.embeddings], [self.feature], [ids], [weights])[0]

    def compute_output_spec(self, inputs: Ids | tuple[Ids, Ids]) -> keras.KerasTensor:
        return self._output_spec(*self._ids_and_weights(inputs), self.feature)

    def _ids_and_weights(self, inputs: Ids | tuple[Ids, Ids]) -> tuple[Ids, Ids | None]:
        if not self.weighted:
            return inputs, None
        if not isinstance(inputs, (tuple, list)) or len(inputs) != 2:
            raise ValueError(
                f"layer {self.name!r} is weighted: call it on a tuple (ids, weights), got "
                f"{type(inputs).__name__}"
            )
        ids, weights = inputs
        return ids, weights

    def get_config(self) -> dict[str, object]:
        config: dict[str, object] = super().get_config()
        f = self.feature
        config.update(
            input_dim=f.input_dim,
            output_dim=f.output_dim,
            combiner=f.combiner,
            initializer=serialize_initializer(f.initializer),
            mode=f.mode,
            hotness=f.hotness,
            pad_value=f.pad_value,
            capacity=f.capacity,
            evict_policy=f.evict_policy,
            min_count=f.min_count,
            key_dtype=f.key_dtype,
            storage_dtype=f.storage_dtype,
            storage=storage_config(f.storage),
            weighted=self.weighted,
        )
        return config


@keras.saving.register_keras_serializable(package="sok_lite")
class EmbeddingCollection(_TableLayer):
    """Many features over one or more sok_lite tables, all looked up in one fused call.

    Args:
      features: FeatureSpec objects (or dicts of their fields), one per feature. Features whose
        `table` name is equal share one table. Fixed-size and hash-table (input_dim None)
        features mix freely; all are looked up in one call.
      **kwargs: keras.layers.Layer arguments (name, trainable, dtype).

    Call args:
      inputs: a dict {feature name: ids} (keys that are not features are ignored), or a list
        with one entry per feature in the order of `features`. Each entry is what
        sok_lite.keras.Embedding accepts. A feature with a weight_feature reads its per-id
        weights from that entry of the dict (a list input cannot carry weights).

    Returns:
      {feature name: [batch, output_dim] tensor} for a dict input, else a list in feature order.

    Raises:
      ValueError: for duplicate feature names, features sharing a table that disagree on it, a
        weight_feature that names a feature, a missing feature or weight entry, a list of the
        wrong length or a list input for weighted features, weights laid out unlike their
        ids (see sok_lite.keras.Embedding), or features of different batch sizes (as
        sok_lite.lookup_sparse: tf.errors.InvalidArgumentError when the batch runs if their
        shapes do not tell).

    >>> import tensorflow as tf, sok_lite as sok
    >>> layer = sok.keras.EmbeddingCollection([
    ...     sok.keras.FeatureSpec("item", 100, 8),
    ...     sok.keras.FeatureSpec("history", 100, 8, combiner="mean", table="item"),
    ... ])
    >>> out = layer({"item": tf.constant([[4]]), "history": tf.ragged.constant([[1, 2, 3]])})
    >>> sorted(out), out["history"].shape
    (['history', 'item'], TensorShape([1, 8]))
    """

    def __init__(
        self, features: Sequence[FeatureSpec | dict[str, object]], **kwargs: object
    ) -> None:
        super().__init__(**kwargs)
        self.features = tuple(FeatureSpec.coerce(f) for f in features)
        if not self.features:
            raise ValueError("EmbeddingCollection needs at least one feature")
        self._table_specs = table_specs(self.features)
        check_weight_features(self.features)

    def build(self, input_shape: object = None) -> None:
        # A tf.Module holds the tables: Keras' own dict tracking does not reach TF variables,
        # TF's does (checkpoint keys .../tables/<table name>).
        store = tf.Module()
        tables = {}
        for spec in self._table_specs:
            assert spec.name is not None  # table_specs names every table
            tables[spec.name] = self._create_table(spec, spec.name)
        store.tables = tables
        self._table_store = store

    @property
    def tables(self) -> dict[str, Variable | DynamicVariable]:
        """{table name: sok_lite.Variable, or DynamicVariable for a hash table}, once built."""
        tables: dict[str, Variable | DynamicVariable] = dict(self._table_store.tables)
        return tables

    def _ordered_inputs(self, inputs: Mapping[str, Ids] | Sequence[Ids]) -> list[Ids]:
        if isinstance(inputs, Mapping):
            missing = [f.name for f in self.features if f.name not in inputs]
            if missing:
                raise ValueError(f"layer {self.name!r}: inputs lack features {missing}")
            return [inputs[f.name] for f in self.features]
        inputs = list(inputs)
        if len(inputs) != len(self.features):
            raise ValueError(
                f"layer {self.name!r}: {len(inputs)} inputs for {len(self.features)} features"
            )
        return inputs

    def _ordered_weights(self, inputs: Mapping[str, Ids] | Sequence[Ids]) -> list[Ids | None]:
        """Per feature, its weights from the dict input, or None for an unweighted feature."""
        weighted = [f for f in self.features if f.weight_feature is not None]
        if not isinstance(inputs, Mapping):
            if weighted:
                raise ValueError(
                    f"layer {self.name!r}: features {[f.name for f in weighted]} are weighted: "
                    "call the layer on a dict that holds their weights, not on a list"
                )
            return [None] * len(self.features)
        missing = [
            f"{f.weight_feature!r} (for feature {f.name!r})"
            for f in weighted
            if f.weight_feature not in inputs
        ]
        if missing:
            raise ValueError(f"layer {self.name!r}: inputs lack the weights {', '.join(missing)}")
        return [
            None if f.weight_feature is None else inputs[f.weight_feature] for f in self.features
        ]

    def call(
        self, inputs: Mapping[str, Ids] | Sequence[Ids]
    ) -> dict[str, tf.Tensor] | list[tf.Tensor]:
        tables = self._table_store.tables
        outputs = self._lookup(
            [tables[f.table_name] for f in self.features],
            self.features,
            self._ordered_inputs(inputs),
            self._ordered_weights(inputs),
        )
        if isinstance(inputs, Mapping):
            return {f.name: out for f, out in zip(self.features, outputs)}
        return outputs

    def compute_output_spec(
        self, inputs: Mapping[str, Ids] | Sequence[Ids]
    ) -> dict[str, keras.KerasTensor] | list[keras.KerasTensor]:
        specs = [
            self._output_spec(x, w, f)
            for x, w, f in zip(
                self._ordered_inputs(inputs), self._ordered_weights(inputs), self.features
            )
        ]
        if isinstance(inputs, Mapping):
            return {f.name: s for f, s in zip(self.features, specs)}
        return specs

    def get_config(self) -> dict[str, object]:
        config: dict[str, object] = super().get_config()
        config["features"] = [f.get_config() for f in self.features]
        return config
