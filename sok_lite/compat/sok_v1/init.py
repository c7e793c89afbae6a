"""sok.Init(global_batch_size=...): SOK's first-API initialization."""

from sok_lite import comm

_global_batch_size: int | None = None


def Init(**kwargs: object) -> str:  # noqa: N802 -- SOK's name
    """Chooses the communicator and records the global batch size, as SOK's `sok.Init` does.

    Call it after `hvd.init()` (when running under Horovod) and before creating any embedding
    layer: the layers shard their tables over the ranks chosen here.

    Args:
      **kwargs: `global_batch_size` (int, required): the batch summed over all ranks. It must be
        divisible by the number of ranks, each of which feeds `global_batch_size // num_ranks`
        samples per step.

    Returns:
      "OK", as SOK.

    Raises:
      TypeError: without global_batch_size, or with an argument SOK's Init does not take.
      ValueError: for a global batch size that is not a positive multiple of the rank count.

    >>> import sok_lite as sok
    >>> sok.Init(global_batch_size=1024)
    'OK'
    """
    global _global_batch_size
    unknown = sorted(set(kwargs) - {"global_batch_size"})
    if unknown:
        raise TypeError(f"Init() got unexpected arguments {unknown}")
    if "global_batch_size" not in kwargs:
        raise TypeError("Init() needs global_batch_size=, the batch summed over all ranks")
    batch = kwargs["global_batch_size"]
    # "auto": Horovod once hvd.init() has run, else one process.
    num_ranks = comm.init("auto").num_ranks
    if not isinstance(batch, int) or batch < 1 or batch % num_ranks:
        raise ValueError(
            f"global_batch_size must be a positive multiple of the {num_ranks} ranks, got {batch!r}"
        )
    _global_batch_size = batch
    return "OK"


def global_batch_size() -> int | None:
    """The global batch size given to Init(), or None before Init() has run."""
    return _global_batch_size
