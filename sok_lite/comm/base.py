"""The Communicator interface: the collectives the distributed lookup is built from."""

import abc

import tensorflow as tf


class Communicator(abc.ABC):
    """Collectives over the ranks of one job. Every rank calls each method in the same order."""

    @property
    @abc.abstractmethod
    def rank(self) -> int:
        """This process's rank in [0, num_ranks)."""

    @property
    @abc.abstractmethod
    def num_ranks(self) -> int:
        """The number of ranks in the job."""

    @property
    def local_rank(self) -> int:
        """This rank's index among the ranks of its machine (its device there)."""
        return 0

    @property
    def shards_per_table(self) -> int:
        """How many shards of each new table this process creates: one per rank it runs.

        Several only for a process that runs several replicas (MirroredStrategy).
        """
        return 1

    @abc.abstractmethod
    def alltoall(self, tensor: tf.Tensor, splits: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Sends tensor[sum(splits[:r]) : sum(splits[:r+1])] to rank r.

        Returns the concatenation of what every rank sent here (in rank order) and the
        received split sizes.
        """

    @abc.abstractmethod
    def allgather(self, tensor: tf.Tensor) -> tf.Tensor:
        """Concatenates `tensor` of every rank along axis 0, in rank order."""

    @abc.abstractmethod
    def allreduce_sum(self, tensor: tf.Tensor) -> tf.Tensor:
        """Sums `tensor` over ranks."""

    @abc.abstractmethod
    def broadcast(self, tensor: tf.Tensor, root: int = 0) -> tf.Tensor:
        """Returns rank root's `tensor` on every rank."""
