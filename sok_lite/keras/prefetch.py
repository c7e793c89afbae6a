"""prefetch_rows: an input pipeline that reads each batch's rows back from tiered tables' disk
one batch ahead, while `model.fit` trains on the batch before it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from sok_lite.keras.layers import Embedding, EmbeddingCollection
from sok_lite.memory.prefetch import prefetch


def prefetch_rows(
    dataset: tf.data.Dataset,
    layer: Embedding | EmbeddingCollection,
    inputs: Callable[[object], object] | None = None,
) -> tf.data.Dataset:
    """`dataset` with each batch's rows on disk read back into RAM one batch ahead.

    The returned dataset yields the same elements. Producing batch i+1 reads the rows of its ids
    that the layer's tiered tables (sok.storage.Disk) hold on disk back into RAM, while the
    model trains on batch i, after batch i's lookup (see sok_lite.prefetch): batch i+1's lookup
    then finds them in RAM. Every tiered table of the layer is covered in one pass; tables in
    RAM are skipped. Results are those without prefetch, bit for bit.

    Args:
      dataset: a batched tf.data.Dataset as `model.fit` takes it: elements `x`, `(x, y)` or
        `(x, y, sample_weight)`.
      layer: the built sok_lite.keras.EmbeddingCollection or Embedding whose tables to fill.
      inputs: a function from `x` to what the layer is called on (for EmbeddingCollection its
        dict or list of ids; for Embedding its ids, or (ids, weights) if weighted). Default:
        `x` itself.

    Returns:
      The dataset, mapped and followed by `prefetch(1)` (which runs the map one batch ahead).

    Raises:
      ValueError: for a layer that is not built, or not one of the two above.

    >>> import tensorflow as tf, sok_lite as sok
    >>> layer = sok.keras.EmbeddingCollection([sok.keras.FeatureSpec("item", None, 4)])
    >>> layer.build()
    >>> data = tf.data.Dataset.from_tensor_slices(({"item": [[1], [2]]}, [0.0, 1.0])).batch(2)
    >>> data = sok.keras.prefetch_rows(data, layer)
    >>> [x["item"].shape for x, _ in data]
    [TensorShape([2, 1])]
    """
    if not isinstance(layer, (Embedding, EmbeddingCollection)):
        raise ValueError(
            f"prefetch_rows takes a sok_lite.keras Embedding or EmbeddingCollection, got "
            f"{type(layer).__name__}"
        )
    if not layer.built:
        raise ValueError(
            f"layer {layer.name!r} is not built: build the model (or the layer) before "
            "prefetch_rows, which reads its tables"
        )
    pick = inputs or (lambda x: x)

    def read_ahead(*element: object) -> object:
        x = element[0]
        tables, ids = _tables_and_ids(layer, pick(x))
        read = prefetch(tables, ids)
        with tf.control_dependencies([read]):
            same = tf.nest.map_structure(tf.identity, element, expand_composites=True)
        return same if len(element) > 1 else same[0]

    # tf.data runs a dataset's functions one thread at a time by default: a prefetch holds the
    # table while it reads, so it takes the op's threads as a lookup does.
    options = tf.data.Options()
    options.threading.max_intra_op_parallelism = 0
    return dataset.map(read_ahead).prefetch(1).with_options(options)


def _tables_and_ids(layer: Embedding | EmbeddingCollection, x: Any) -> tuple[list[Any], list[Any]]:
    """The layer's tables and, per table, the ids the layer would look up in it for input x."""
    if isinstance(layer, Embedding):
        ids = layer._ids_and_weights(x)[0]
        return [layer.embeddings], [layer._id_lists(ids, None, layer.feature)[0]]
    ordered = layer._ordered_inputs(x)
    tables = [layer.tables[f.table_name] for f in layer.features]
    return tables, [layer._id_lists(i, None, f)[0] for i, f in zip(ordered, layer.features)]
