"""ReplicaShards: one table in a process that runs several replicas (MirroredStrategy).

Each replica is a rank and owns its own shard of every table, so a process with several
replicas holds several shards of one table. ReplicaShards groups them behind one object: inside
`strategy.run` it stands for the running replica's shard (as tf.distribute's own distributed
variables resolve to their replica's component), so layers, GradientTape and the optimizers use
it like a variable. Outside, it exposes the shards and the table-wide facts only.
"""

from collections.abc import Callable, Sequence

import tensorflow as tf

from sok_lite.comm.strategy import StrategyCommunicator, in_replica_context


def create_shards(
    factory: Callable[[], object], communicator: StrategyCommunicator
) -> "ReplicaShards":
    """Calls factory() once per local replica, on its device and pinned to its rank."""
    shards = []
    with tf.init_scope():
        for rank, device in zip(communicator.local_ranks, communicator.local_devices):
            with communicator.pinned(rank), tf.device(device):
                shards.append(factory())
    return ReplicaShards(shards, communicator.local_ranks)


class ReplicaShards:
    """The shards of one table held by this process, one per local replica.

    Inside `strategy.run`, attribute access (handle, shape, dtype, assign, ...) goes to the
    running replica's shard, and GradientTape differentiates with respect to that shard's
    handle; the gradient is a tf.IndexedSlices over that shard. Outside, `shards` and `ranks`
    give every shard with its rank, and global_shape, mode, dtype, name and trainable describe
    the table. `shape` outside strategy.run is the global shape.
    """

    # Makes TF treat the object as a resource variable: GradientTape takes `.handle`.
    _should_act_as_resource_variable = True

    def __init__(self, shards: Sequence, ranks: Sequence[int]):
        self._shards = tuple(shards)
        self._ranks = tuple(ranks)
        self._index = {rank: i for i, rank in enumerate(self._ranks)}

    @property
    def shards(self) -> tuple:
        """This process's shards, in the order of `ranks`."""
        return self._shards

    @property
    def ranks(self) -> tuple[int, ...]:
        """The rank of each shard."""
        return self._ranks

    def local(self):
        """The running replica's shard (inside strategy.run only).

        Raises:
          RuntimeError: outside strategy.run.
        """
        from sok_lite import comm

        try:
            rank = comm.current().rank
        except RuntimeError:
            raise RuntimeError(
                f"'{self.name}' has one shard per replica: use it inside strategy.run(), or "
                "read its .shards"
            ) from None
        return self._shards[self._index[rank]]

    def _in_replica(self) -> bool:
        return in_replica_context()

    # What describes the whole table, in any context.
    name = property(lambda self: self._shards[0].name)
    dtype = property(lambda self: self._shards[0].dtype)
    trainable = property(lambda self: self._shards[0].trainable)
    _unique_id = property(lambda self: f"sok_lite_shards_{id(self)}")

    @property
    def shape(self) -> tf.TensorShape:
        if self._in_replica():
            return self.local().shape
        return self.global_shape

    @property
    def _trainable(self) -> bool:
        return self.trainable

    @_trainable.setter
    def _trainable(self, value: bool) -> None:
        for shard in self._shards:
            shard._trainable = value

    def __getattr__(self, name):
        # Only reached for names not defined here: the table-wide ones of the shards
        # (global_shape, mode, placement, dimension, ...) and, inside strategy.run, the rest.
        if name.startswith("__") or name in ("_shards", "_ranks", "_index"):
            raise AttributeError(name)
        shard = self._shards[0]
        if name in ("global_shape", "mode", "placement", "dimension", "key_dtype"):
            return getattr(shard, name)
        if not self._in_replica():
            raise AttributeError(
                f"'{shard.name}' has one shard per replica: '{name}' is defined inside "
                "strategy.run(); outside, read .shards"
            )
        return getattr(self.local(), name)

    def ref(self):
        """A hashable reference, as tf.Variable.ref()."""
        return _Ref(self)

    def __repr__(self):
        return f"<sok_lite.ReplicaShards '{self.name}' ranks={list(self._ranks)}>"


class _Ref:
    def __init__(self, obj):
        self._obj = obj

    def deref(self):
        return self._obj

    def __hash__(self):
        return id(self._obj)

    def __eq__(self, other):
        return isinstance(other, _Ref) and other._obj is self._obj


def local_shard(var: tf.Variable) -> tf.Variable:
    """The shard of `var` that this rank uses: the running replica's for ReplicaShards."""
    return var.local() if isinstance(var, ReplicaShards) else var


def shards_of(var) -> tuple:
    """Every shard of `var` in this process: itself unless it is a ReplicaShards."""
    return var.shards if isinstance(var, ReplicaShards) else (var,)
