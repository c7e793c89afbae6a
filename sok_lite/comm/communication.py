"""SOK 2.x's `sok.communication` functions over the communicator chosen by sok_lite.init.

In sok_lite every rank is one device: under Horovod one process, under a tf.distribute
strategy one replica. So `num_gpus()` equals `num_ranks()`, `global_gpu_id()` equals `rank()`,
`num_gpu_per_rank()` is 1 and `id_in_rank()` is 0. As in SOK, every rank calls each collective
in the same order; before sok.init() has run, the first call chooses the communicator as
`sok.init()` (comm="auto") does.

Functions: rank(), num_ranks(), local_rank(), id_in_rank(), num_gpu_per_rank(),
global_gpu_id(), num_gpus(), alltoall(tensor, splits) -> (received, received splits),
allreduce(tensor, op="sum" | "average" | "max" | "min"), allgather(tensor) (along axis 0, in
rank order) and broadcast(tensor, root=0).

>>> import tensorflow as tf, sok_lite as sok
>>> sok.communication.num_gpus() == sok.communication.num_ranks()
True
>>> sok.communication.allreduce(tf.constant([1.0, 2.0]), "max").numpy().tolist()
[1.0, 2.0]
"""

import tensorflow as tf

from sok_lite import comm

_REDUCE_OPS = ("sum", "average", "max", "min")


def rank() -> int:
    """This rank, in [0, num_ranks())."""
    return comm.current().rank


def num_ranks() -> int:
    """The number of ranks in the job."""
    return comm.current().num_ranks


def local_rank() -> int:
    """This rank's index among the ranks of its machine (Horovod: hvd.local_rank())."""
    return comm.current().local_rank


def id_in_rank() -> int:
    """This device's index within its rank: always 0 (a rank is one device)."""
    return 0


def num_gpu_per_rank() -> int:
    """The devices per rank: always 1."""
    return 1


def global_gpu_id() -> int:
    """This device's index among all devices of the job: rank()."""
    return comm.current().rank


def num_gpus() -> int:
    """The number of devices of the job: num_ranks()."""
    return comm.current().num_ranks


def alltoall(tensor, splits):
    """Sends tensor[sum(splits[:r]) : sum(splits[:r + 1])] to rank r.

    Returns:
      (what every rank sent here, concatenated in rank order; the sizes received from each
      rank, int64).
    """
    return comm.current().alltoall(tf.convert_to_tensor(tensor), tf.convert_to_tensor(splits))


def allreduce(tensor, op: str = "sum"):
    """Reduces `tensor` elementwise over ranks.

    Args:
      tensor: the same shape on every rank.
      op: "sum", "average", "max" or "min".

    Raises:
      ValueError: for another op (Horovod's op constants included: pass the name).
    """
    if op not in _REDUCE_OPS:
        raise ValueError(f"allreduce op must be one of {_REDUCE_OPS}, got {op!r}")
    communicator = comm.current()
    tensor = tf.convert_to_tensor(tensor)
    if op in ("max", "min"):
        stacked = communicator.allgather(tensor[tf.newaxis])
        reduce = tf.reduce_max if op == "max" else tf.reduce_min
        return reduce(stacked, axis=0)
    total = communicator.allreduce_sum(tensor)
    if op == "sum":
        return total
    if total.dtype.is_integer:
        return total // communicator.num_ranks
    return total / tf.cast(communicator.num_ranks, total.dtype)


def allgather(tensor):
    """Concatenates `tensor` of every rank along axis 0, in rank order."""
    return comm.current().allgather(tf.convert_to_tensor(tensor))


def broadcast(tensor, root: int = 0):
    """Returns rank root's `tensor` on every rank."""
    return comm.current().broadcast(tf.convert_to_tensor(tensor), root)


__all__ = [
    "rank",
    "num_ranks",
    "local_rank",
    "id_in_rank",
    "num_gpu_per_rank",
    "global_gpu_id",
    "num_gpus",
    "alltoall",
    "allreduce",
    "allgather",
    "broadcast",
]
