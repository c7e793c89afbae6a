"""The key hash and owner rules of kernels/core/cpu_gpu_rules.h, in NumPy (and, for serving
graphs, in TensorFlow ops). Imports nothing else of sok_lite, and TensorFlow only inside
splitmix64_tf, so tools without TensorFlow can use the NumPy part.

- Hash-table key k lives on rank hash_owner(k, N), stored as k.
- Static row id i lives on rank row_owner(i, N) = i % N, at local row local_row(i, N) = i // N.
"""

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tensorflow as tf

_GOLDEN = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def splitmix64(x) -> np.ndarray:
    """One splitmix64 step (SplitMix64) on uint64 values; NumPy wraps as C++ does."""
    with np.errstate(over="ignore"):  # NumPy scalars warn on the intended wrap-around
        x = np.asarray(x, dtype=np.uint64) + np.uint64(_GOLDEN)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(_M1)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(_M2)
        return x ^ (x >> np.uint64(31))


def key_hash(keys) -> np.ndarray:
    """KeyHash: the uint64 hash of int64 hash-table keys."""
    return splitmix64(np.asarray(keys).astype(np.int64).view(np.uint64))


def hash_owner(keys, num_ranks: int) -> np.ndarray:
    """HashOwner: the rank owning each int64 hash-table key among num_ranks."""
    return (key_hash(keys) % np.uint64(num_ranks)).astype(np.int64)


# The owner codes of cpu_gpu_rules.h (SOK_LITE_OWNER_*): how the exchange op finds the owner
# of an id, besides a rank K for a table localized on K.
OWNER_BY_ROW = -1  # static row i on rank row_owner(i, N)
OWNER_BY_HASH = -2  # hash-table key k on rank hash_owner(k, N)


def _ids(ids):
    """Ints, NumPy arrays and tensors as they are; lists and tuples as an int64 array."""
    return np.asarray(ids, dtype=np.int64) if isinstance(ids, (list, tuple)) else ids


def row_owner(ids, num_ranks: int):
    """RowOwner: the rank holding each (non-negative) row id of a static table (ints, NumPy
    arrays or tensors)."""
    return _ids(ids) % num_ranks


def local_row(ids, num_ranks: int):
    """LocalRow: where each (non-negative) row id of a static table sits on its rank."""
    return _ids(ids) // num_ranks


def global_row(local, rank: int, num_ranks: int):
    """The row id of local row `local` of rank `rank`: the inverse of row_owner/local_row."""
    return _ids(local) * num_ranks + rank


def rows_held(rows: int, rank: int, num_ranks: int) -> int:
    """How many rows of a static table of `rows` rows rank `rank` holds."""
    return len(range(rank, rows, num_ranks))  # the ids i < rows with row_owner(i) == rank


def splitmix64_tf(x: "tf.Tensor") -> "tf.Tensor":
    """SplitMix64 on a tf.uint64 tensor, in plain TF ops (graphs that run without sok_lite)."""
    import tensorflow as tf

    def u64(c: int):
        return tf.constant(c, tf.uint64)

    x = x + u64(_GOLDEN)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, u64(30))) * u64(_M1)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, u64(27))) * u64(_M2)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, u64(31)))


def rounding_bits(seed: int, step: int, rows, dim: int, col0: int = 0) -> np.ndarray:
    """RoundingRowKey / RoundingBits: the [len(rows), dim] 16-bit draws (uint32) with which an
    optimizer step rounds global `rows` of a bfloat16 table stochastically, at columns
    col0 .. col0 + dim - 1 (a bfloat16 slot s draws at col0 = (s + 1) * dim)."""
    u64, u32 = np.uint64, np.uint32
    step_bits = np.array(step, np.int64).view(u64)
    row_bits = np.asarray(rows, np.int64).reshape(-1).view(u64)
    key = splitmix64(splitmix64(splitmix64(u64(seed)) ^ step_bits) ^ row_bits)
    key32 = ((key ^ (key >> u64(32))) & u64(0xFFFFFFFF)).astype(u32)
    cols = (np.arange(dim, dtype=np.uint64) + u64(col0)).astype(u32)
    with np.errstate(over="ignore"):
        x = key32[:, None] ^ (cols * u32(0x9E3779B9))[None, :]
        x ^= x >> u32(16)
        x *= u32(0x21F0AAAD)
        x ^= x >> u32(15)
        x *= u32(0x735A2D97)
        x ^= x >> u32(15)
    return x >> u32(16)
