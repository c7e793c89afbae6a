"""What SOK's first-API layers share: one distributed table of per-rank vocabulary x ranks."""

import keras
import tensorflow as tf

from sok_lite import comm
from sok_lite.compat.sok2_dynamic import DynamicVariable
from sok_lite.keras.features import FeatureSpec, InitializerLike, serialize_initializer
from sok_lite.keras.layers import _TableLayer
from sok_lite.tables.variable import Variable

# SOK's tables start uniform in [-0.05, 0.05], which is Keras' "random_uniform".
DEFAULT_INITIALIZER = "random_uniform"


def _positive(name: str, value: object) -> int:
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


class SokTableLayer(_TableLayer):
    """One sok_lite table of `max_vocabulary_size_per_gpu * num_ranks` rows, row i on rank i % N.

    SOK sizes its tables per GPU and places key k on GPU k % N; a distributed sok_lite.Variable
    of the global size gives each rank the same number of rows, placed the same way.
    """

    # The arguments a layer class adds to the table's, which get_config saves as they are.
    _LAYER_ARGS: tuple[str, ...] = ()

    def __init__(
        self,
        max_vocabulary_size_per_gpu: int,
        embedding_vec_size: int,
        *,
        use_hashtable: bool = True,
        key_dtype: tf.DType | str | None = None,
        embedding_initializer: InitializerLike | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)
        self.max_vocabulary_size_per_gpu = _positive(
            "max_vocabulary_size_per_gpu", max_vocabulary_size_per_gpu
        )
        self.embedding_vec_size = _positive("embedding_vec_size", embedding_vec_size)
        # Kept for SOK's signature; ids index the table directly (see docs/migration_from_sok.md).
        self.use_hashtable = bool(use_hashtable)
        self.key_dtype = key_dtype
        self.embedding_initializer = embedding_initializer or DEFAULT_INITIALIZER

    def _make_feature(self, combiner: str, hotness: int) -> FeatureSpec:
        """The table's feature spec, sized for the ranks of the job at build time."""
        return FeatureSpec(
            name=self.name,
            input_dim=self.max_vocabulary_size_per_gpu * comm.num_ranks(),
            output_dim=self.embedding_vec_size,
            combiner=combiner,
            initializer=self.embedding_initializer,
            hotness=hotness,
        )

    def _build_table(self, feature: FeatureSpec) -> None:
        self.feature = feature
        self.var = self._create_table(feature.table_spec(), "embedding_variable")

    @property
    def embedding_variable(self) -> Variable | DynamicVariable:
        """The sok_lite.Variable behind the layer (this rank's rows), once built."""
        return self.var

    def get_config(self) -> dict[str, object]:
        config: dict[str, object] = super().get_config()
        config.update(
            max_vocabulary_size_per_gpu=self.max_vocabulary_size_per_gpu,
            embedding_vec_size=self.embedding_vec_size,
            use_hashtable=self.use_hashtable,
            key_dtype=None
            if self.key_dtype is None
            else keras.backend.standardize_dtype(self.key_dtype),
            embedding_initializer=serialize_initializer(self.embedding_initializer),
        )
        config.update({name: getattr(self, name) for name in self._LAYER_ARGS})
        return config
