"""The serving copies lookup_sparse reads while sok_lite.io.serving exports a model: the export
registers them here (lookups do not import the exporter above them), and lookup_sparse combines
their rows with plain TF ops."""

import contextlib
from collections.abc import Iterator, Mapping
from typing import Protocol

import tensorflow as tf


class ServingTable(Protocol):
    """A table's serving copy as lookup_sparse reads it."""

    @property
    def row_dtype(self) -> tf.DType:
        """The dtype of the rows `lookup` gives."""

    def lookup(self, ids: tf.Tensor) -> tf.Tensor:
        """The rows [n, dim] of ids [n]."""


_active: Mapping[object, ServingTable] | None = None  # table ref -> serving copy while exporting


def active_table(var: tf.Variable) -> ServingTable | None:
    """The serving copy of `var` (an object with .lookup(ids)) while a model is being exported,
    else None."""
    return None if _active is None else _active.get(var.ref())


def combine(
    rows: tf.Tensor, row_splits: tf.Tensor, weights: tf.Tensor | None, combiner: str
) -> tf.Tensor:
    """Plain-TF per-sample sum / mean / sqrtn of [n, dim] rows; a sample with no ids -> zeros."""
    w = tf.ones([tf.shape(rows)[0]], rows.dtype) if weights is None else weights
    weighted = tf.RaggedTensor.from_row_splits(rows * w[:, None], row_splits)
    summed = tf.reduce_sum(weighted, axis=1)
    if combiner == "sum":
        return summed
    w_ragged = tf.RaggedTensor.from_row_splits(w if combiner == "mean" else w * w, row_splits)
    denom = tf.reduce_sum(w_ragged, axis=1)
    if combiner == "sqrtn":
        denom = tf.sqrt(denom)
    return tf.math.divide_no_nan(summed, denom[:, None])


@contextlib.contextmanager
def serving_copies(tables: Mapping[object, ServingTable]) -> Iterator[None]:
    """In the block, lookups of the tables in `tables` (ref -> serving copy) read the copies."""
    global _active
    previous, _active = _active, tables
    try:
        yield
    finally:
        _active = previous
