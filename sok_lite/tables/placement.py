"""Where the rows of a table live: parsed once from SOK-style mode strings."""

import dataclasses

from sok_lite import comm
from sok_lite.tables.key_hash import rows_held


@dataclasses.dataclass(frozen=True)
class Placement:
    """Row placement of a table across ranks.

    kind "distributed": global row i lives on rank i % N at local row i // N.
    kind "localized": the whole table lives on rank `rank`.
    """

    kind: str
    rank: int = 0

    @classmethod
    def parse(cls, mode: str) -> "Placement":
        """Parses "distributed" or "localized:K" (K a rank >= 0).

        Raises:
          ValueError: for any other string.
        """
        if mode == "distributed":
            return cls("distributed")
        kind, sep, rank = mode.partition(":")
        if kind == "localized" and sep and rank.isdigit():
            return cls("localized", int(rank))
        raise ValueError(f"mode must be 'distributed' or 'localized:<rank>', got {mode!r}")

    @property
    def mode(self) -> str:
        return "distributed" if self.kind == "distributed" else f"localized:{self.rank}"

    @property
    def target_gpu(self) -> int:
        """SOK's name for the owner: K for "localized:K", -1 for "distributed"."""
        return self.rank if self.kind == "localized" else -1

    def local_rows(self, global_rows: int, rank: int, num_ranks: int) -> int:
        """Number of rows rank `rank` holds of a table with `global_rows` rows."""
        if self.kind == "localized":
            return global_rows if rank == self.rank else 0
        return rows_held(global_rows, rank, num_ranks)


class PlacedTable:
    """The placement answers of both table classes (mixed into each; `_placement` is set by
    their constructor)."""

    _placement: Placement

    @property
    def mode(self) -> str:
        """ "distributed" (rows spread over the ranks) or "localized:K" (every row on rank K)."""
        return self._placement.mode

    @property
    def placement(self) -> Placement:
        """Where the rows live (kind "distributed": spread over the ranks; "localized": on rank
        `rank`)."""
        return self._placement

    @property
    def target_gpu(self) -> int:
        """As in SOK: K for mode "localized:K", -1 for "distributed"."""
        return self._placement.target_gpu

    @property
    def num_gpus(self) -> int:
        """As in SOK: the number of ranks of the job (a rank is one device)."""
        return comm.current().num_ranks
