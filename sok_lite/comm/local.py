"""The single-process communicator: N = 1, every collective is the identity and runs no op."""

from sok_lite.comm.base import Communicator


class LocalCommunicator(Communicator):
    @property
    def rank(self) -> int:
        return 0

    @property
    def num_ranks(self) -> int:
        return 1

    def alltoall(self, tensor, splits):
        return tensor, splits

    def allgather(self, tensor):
        return tensor

    def allreduce_sum(self, tensor):
        return tensor

    def broadcast(self, tensor, root=0):
        if root != 0:
            raise ValueError(f"broadcast root {root} does not exist in a 1-rank job")
        return tensor
