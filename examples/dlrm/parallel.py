"""Data parallelism for the dense part of the model under Horovod (one process: no-ops).

The embedding tables are model-parallel: sok_lite sends each id to the rank that owns its row
and each row's gradient back to that rank, so table gradients are applied where they are and
never all-reduced. The dense weights are replicated: they start from rank 0's values and their
gradients are summed over ranks.
"""

import itertools

import numpy as np
import tensorflow as tf

import sok_lite as sok


def init_horovod():
    """Starts Horovod when it is installed (one rank without horovodrun); returns hvd or None."""
    try:
        import horovod.tensorflow as hvd
    except ImportError:
        return None
    hvd.init()
    return hvd


class DenseAllReduceOptimizer(sok.keras.OptimizerWrapper):
    """sok.OptimizerWrapper that also makes the dense gradients those of the global batch.

    Keras' fit computes the mean loss over this rank's share of the batch. Scaling it by
    1 / num_ranks (through `scale_loss`, which fit applies before differentiating) makes it this
    rank's part of the global mean; then the table gradients, which the lookup already sums over
    ranks per row, are exact, and summing the dense gradients over ranks gives theirs. Shares
    must be equal. Under the "mixed_float16" policy the LossScaleOptimizer that compile puts
    around it applies this scaling too (sok.keras.OptimizerWrapper sees to it).

    Args:
      inner_optimizer: a Keras optimizer (e.g. keras.optimizers.Adam), as for
        sok.OptimizerWrapper.
      hvd: horovod.tensorflow, or None for one process.
    """

    def __init__(self, inner_optimizer, hvd=None, name: str | None = None):
        super().__init__(inner_optimizer, name=name)
        self._hvd = hvd if hvd is not None and hvd.size() > 1 else None

    def scale_loss(self, loss):
        loss = super().scale_loss(loss)
        return loss if self._hvd is None else loss / self._hvd.size()

    def apply_gradients(self, grads_and_vars):
        pairs = list(grads_and_vars)
        if self._hvd is not None:
            dense = [i for i, (g, v) in enumerate(pairs) if g is not None and not _is_table(v)]
            summed = self._hvd.grouped_allreduce([pairs[i][0] for i in dense], op=self._hvd.Sum)
            for i, g in zip(dense, summed):
                pairs[i] = (g, pairs[i][1])
        return super().apply_gradients(pairs)


def _is_table(variable) -> bool:
    return bool(sok.filter_variables([variable])[0])


def broadcast_dense_weights(model, hvd) -> None:
    """Sets every replicated (non-table) weight of `model` to rank 0's value."""
    if hvd is None or hvd.size() == 1:
        return
    _, dense = sok.filter_variables(model.weights)
    for i, weight in enumerate(dense):
        value = hvd.broadcast(tf.convert_to_tensor(weight), root_rank=0, name=f"dense_init_{i}")
        weight.assign(value)


def allgather(array: np.ndarray, hvd) -> np.ndarray:
    """Concatenates `array` of every rank along axis 0, in rank order."""
    if hvd is None or hvd.size() == 1:
        return array
    return hvd.allgather(tf.convert_to_tensor(array)).numpy()


def mean_over_ranks(values, hvd) -> np.ndarray:
    """The element-wise mean of `values` (a list of floats) over ranks."""
    values = np.asarray(values, np.float64)
    if hvd is None or hvd.size() == 1:
        return values
    return hvd.allreduce(tf.convert_to_tensor(values), op=hvd.Average).numpy()


def rank_stream(batch_of_step, signature) -> tf.data.Dataset:
    """An endless tf.data stream of batch_of_step(0), (1), ...: each a (features, labels) pair
    matching `signature`, this rank's share of that step's global batch."""

    def batches():
        for step in itertools.count():
            batch = batch_of_step(step)
            yield batch.features, batch.labels

    return tf.data.Dataset.from_generator(batches, output_signature=signature).prefetch(2)
