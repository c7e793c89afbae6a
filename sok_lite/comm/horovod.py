"""The Horovod communicator: horovod.tensorflow collectives (gloo on CPU, NCCL on GPU)."""

import tensorflow as tf

from sok_lite.comm.base import Communicator


def horovod_is_initialized() -> bool:
    """True when horovod.tensorflow is importable and hvd.init() has run in this process."""
    try:
        import horovod.tensorflow as hvd
    except ImportError:
        return False
    return hvd.is_initialized()


class HorovodCommunicator(Communicator):
    """Collectives over the Horovod job; calls hvd.init() if the user has not."""

    def __init__(self):
        import horovod.tensorflow as hvd

        if not hvd.is_initialized():
            hvd.init()
        self._hvd = hvd

    @property
    def rank(self) -> int:
        return self._hvd.rank()

    @property
    def num_ranks(self) -> int:
        return self._hvd.size()

    @property
    def local_rank(self) -> int:
        return self._hvd.local_rank()

    def alltoall(self, tensor, splits):
        # Horovod takes and returns int32 split sizes; its gradient is the reverse all-to-all.
        out, received = self._hvd.alltoall(tensor, splits=tf.cast(splits, tf.int32))
        return out, tf.cast(received, tf.int64)

    def allgather(self, tensor):
        return self._hvd.allgather(tensor)

    def allreduce_sum(self, tensor):
        return self._hvd.allreduce(tensor, op=self._hvd.Sum)

    def broadcast(self, tensor, root=0):
        return self._hvd.broadcast(tensor, root_rank=root)
