"""The tf.distribute communicator: collectives of the strategy in scope, one replica per rank.

Built for MultiWorkerMirroredStrategy with one replica per worker process (rank = the worker's
replica id). Variable-size exchanges are all-gathers padded to the per-step maximum (sizes are
all-gathered first); calls must happen inside `strategy.run` (replica context).
"""

import tensorflow as tf

from sok_lite.comm.base import Communicator


def _context():
    ctx = tf.distribute.get_replica_context()
    if ctx is None or tf.distribute.in_cross_replica_context():
        raise RuntimeError("sok_lite collectives under tf.distribute run inside strategy.run()")
    return ctx


class StrategyCommunicator(Communicator):
    def __init__(self, strategy: tf.distribute.Strategy):
        resolver = getattr(strategy.extended, "_cluster_resolver", None)
        self._strategy = strategy
        self._num_ranks = strategy.num_replicas_in_sync
        self._rank = resolver.task_id if resolver is not None and resolver.task_id else 0
        workers = getattr(strategy.extended, "_num_workers", 1)
        if self._num_ranks != workers:
            raise ValueError(
                f"sok_lite's strategy communicator needs one replica per worker process, got "
                f"{self._num_ranks} replicas on {workers} workers"
            )

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def num_ranks(self) -> int:
        return self._num_ranks

    def _gather_padded(self, tensor):
        """[N, max_len, ...]: every rank's tensor padded along axis 0 to the longest."""
        ctx = _context()
        n = tf.shape(tensor, out_type=tf.int64)[0]
        longest = tf.reduce_max(ctx.all_gather(n[None], axis=0))  # ReduceOp has no MAX
        pad = [[0, longest - n]] + [[0, 0]] * (tensor.shape.rank - 1)
        return ctx.all_gather(tf.pad(tensor, pad)[None], axis=0)

    def alltoall(self, tensor, splits):
        splits = tf.cast(splits, tf.int64)
        sizes = _context().all_gather(splits[None], axis=0)  # [N, N]: sizes[src, dst]
        received_splits = sizes[:, self._rank]

        @tf.custom_gradient
        def exchange(x):
            gathered = self._gather_padded(x)  # [N, max_len, ...]
            width = tf.shape(gathered, out_type=tf.int64)[1]
            starts = tf.cumsum(sizes, axis=1, exclusive=True)[:, self._rank]
            # Flat positions of what each source sent here, source by source.
            ranges = tf.ragged.range(starts, starts + received_splits)
            rows = tf.range(self._num_ranks, dtype=tf.int64)[:, None] * width
            flat = (ranges + rows).flat_values
            merged = tf.reshape(gathered, tf.concat([[-1], tf.shape(x)[1:]], 0))
            out = tf.gather(merged, flat)

            def grad(dy):  # the reverse exchange returns each gradient row to its sender
                back, _ = self.alltoall(dy, received_splits)
                return back

            return out, grad

        return exchange(tensor), received_splits

    def allgather(self, tensor):
        ctx = _context()
        n = tf.shape(tensor, out_type=tf.int64)[0]
        counts = ctx.all_gather(n[None], axis=0)
        gathered = self._gather_padded(tensor)
        width = tf.shape(gathered, out_type=tf.int64)[1]
        ranges = tf.ragged.range(tf.zeros_like(counts), counts)
        rows = tf.range(self._num_ranks, dtype=tf.int64)[:, None] * width
        merged = tf.reshape(gathered, tf.concat([[-1], tf.shape(tensor)[1:]], 0))
        return tf.gather(merged, (ranges + rows).flat_values)

    def allreduce_sum(self, tensor):
        return _context().all_reduce(tf.distribute.ReduceOp.SUM, tensor)

    def broadcast(self, tensor, root=0):
        keep = tf.cast(tf.equal(self._rank, root), tensor.dtype)
        return self.allreduce_sum(tensor * keep)
