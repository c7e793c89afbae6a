"""The tf.distribute communicator: collectives of the strategy in scope, one rank per replica.

Works for MirroredStrategy (several replicas in one process) and MultiWorkerMirroredStrategy
(one or more replicas per worker process). Rank = the replica's id in the sync group. Inside
`strategy.run` the rank is the running replica's; a process with several replicas holds one
shard of each table per replica (sok_lite.comm.shards). Variable-size exchanges are all-gathers
padded to the per-step maximum (sizes are all-gathered first); they run in replica context.
"""

import contextlib
import threading

import tensorflow as tf

from sok_lite.comm.base import Communicator


def _context():
    if not in_replica_context():
        raise RuntimeError("sok_lite collectives under tf.distribute run inside strategy.run()")
    return tf.distribute.get_replica_context()


def in_replica_context() -> bool:
    """True inside strategy.run (a replica's function); False in cross-replica context and
    outside any strategy (where TF's default replica context is not a replica of ours)."""
    if not tf.distribute.has_strategy() or tf.distribute.in_cross_replica_context():
        return False
    return tf.distribute.get_replica_context() is not None


def _replica_id(ctx) -> int:
    replica_id = tf.get_static_value(ctx.replica_id_in_sync_group)
    if replica_id is None:
        raise RuntimeError("sok_lite needs a strategy whose replica id is known when tracing")
    return int(replica_id)


class StrategyCommunicator(Communicator):
    """Collectives over the replicas of a MirroredStrategy or MultiWorkerMirroredStrategy."""

    def __init__(self, strategy: tf.distribute.Strategy):
        self._strategy = strategy
        self._num_ranks = strategy.num_replicas_in_sync
        # The sync-group ids of this process's replicas, in local order: one eager step asks
        # each replica for its id (no collective runs).
        with tf.init_scope():
            ids = strategy.run(lambda: tf.distribute.get_replica_context().replica_id_in_sync_group)
            self._local_ranks = tuple(int(i) for i in strategy.experimental_local_results(ids))
        self._local_devices = tuple(strategy.extended.worker_devices)
        self._pinned = threading.local()

    @property
    def strategy(self) -> tf.distribute.Strategy:
        return self._strategy

    @property
    def local_ranks(self) -> tuple[int, ...]:
        """The ranks of this process's replicas, in the strategy's local order."""
        return self._local_ranks

    @property
    def local_devices(self) -> tuple[str, ...]:
        """The device of each local replica, in the order of local_ranks."""
        return self._local_devices

    @property
    def rank(self) -> int:
        """The running replica's rank inside strategy.run (or while a shard is created for
        one rank); outside, the process's rank when it runs a single replica."""
        pinned = getattr(self._pinned, "rank", None)
        if pinned is not None:
            return pinned
        if in_replica_context():
            return _replica_id(tf.distribute.get_replica_context())
        if len(self._local_ranks) == 1:
            return self._local_ranks[0]
        raise RuntimeError(
            f"this process runs {len(self._local_ranks)} replicas: the rank is defined inside "
            "strategy.run(); outside it, see sok_lite.comm.current().local_ranks"
        )

    @property
    def num_ranks(self) -> int:
        return self._num_ranks

    @property
    def local_rank(self) -> int:
        """The running replica's index among this process's replicas (its device)."""
        return self._local_ranks.index(self.rank)

    @property
    def shards_per_table(self) -> int:
        # Also inside strategy.run: a layer built there by the first replica builds the
        # shards of every replica of this process.
        if getattr(self._pinned, "rank", None) is not None:
            return 1
        return len(self._local_ranks)

    @contextlib.contextmanager
    def pinned(self, rank: int):
        """Within the block, this thread's rank is `rank` (to create one replica's shards)."""
        saved = getattr(self._pinned, "rank", None)
        self._pinned.rank = rank
        try:
            yield
        finally:
            self._pinned.rank = saved

    def _gather_padded(self, tensor):
        """[N, max_len, ...]: every rank's tensor padded along axis 0 to the longest."""
        ctx = _context()
        n = tf.shape(tensor, out_type=tf.int64)[0]
        longest = tf.reduce_max(ctx.all_gather(n[None], axis=0))  # ReduceOp has no MAX
        pad = [[0, longest - n]] + [[0, 0]] * (tensor.shape.rank - 1)
        return ctx.all_gather(tf.pad(tensor, pad)[None], axis=0)

    def alltoall(self, tensor, splits):
        rank = self.rank
        splits = tf.cast(splits, tf.int64)
        sizes = _context().all_gather(splits[None], axis=0)  # [N, N]: sizes[src, dst]
        received_splits = sizes[:, rank]

        @tf.custom_gradient
        def exchange(x):
            gathered = self._gather_padded(x)  # [N, max_len, ...]
            width = tf.shape(gathered, out_type=tf.int64)[1]
            starts = tf.cumsum(sizes, axis=1, exclusive=True)[:, rank]
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
        keep = tf.cast(tf.equal(self.rank, root), tensor.dtype)
        return self.allreduce_sum(tensor * keep)
