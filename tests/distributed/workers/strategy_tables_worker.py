"""Three GradientTape steps of lookup_sparse + OptimizerScope(Adagrad) on a sok_lite.Variable and a
DynamicVariable, on one process or under MirroredStrategy (2 logical CPUs); every run sees the
same global batches. Writes this process's shards for tests/distributed/test_strategy_tables.py.

    python strategy_tables_worker.py OUT_DIR {single,mirrored} [disk]

With "disk" the DynamicVariable keeps its rows beyond a tiny RAM budget in a disk tier per
replica under OUT_DIR/tier.
"""

import contextlib
import json
import pathlib
import sys

from tests.distributed.workers.strategy_setup import make_strategy

out_dir, kind = pathlib.Path(sys.argv[1]), sys.argv[2]
tiered = sys.argv[3:] == ["disk"]
strategy = make_strategy(kind)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import sok_lite as sok  # noqa: E402
from sok_lite.comm.shards import shards_of  # noqa: E402

STEPS, GLOBAL_BATCH, ROWS, DIM = 3, 8, 23, 4
rng = np.random.default_rng(0)
# Per step: ids of the static table, keys of the hash table (any int64), upstream gradients.
batches = [
    (
        [rng.integers(0, ROWS, rng.integers(0, 4)) for _ in range(GLOBAL_BATCH)],
        [rng.integers(-(2**40), 2**40, rng.integers(1, 3)) for _ in range(GLOBAL_BATCH)],
        rng.standard_normal([2, GLOBAL_BATCH, DIM]).astype(np.float32),
    )
    for _ in range(STEPS)
]

with strategy.scope() if strategy else contextlib.nullcontext():
    communicator = sok.init()  # "auto": the strategy in scope
    assert (type(communicator).__name__ == "StrategyCommunicator") == (strategy is not None)
    static = sok.Variable(shape=[ROWS, DIM], initializer="random_normal", name="static")
    # ~4.5 KB: the disk index's fixed ~3.5 KB (a bit per slot of a few segments) and about ten
    # rows in RAM per replica, of the ~24 each one stores.
    storage = sok.storage.Disk(out_dir / "tier", ram_budget=4608) if tiered else None
    dynamic = sok.DynamicVariable(
        DIM, initializer="random_uniform", name="dynamic", storage=storage
    )
    optimizer = keras.optimizers.Adagrad(0.1)
tables = [static, dynamic]


def share(rank: int, num_ranks: int) -> slice:
    local = GLOBAL_BATCH // num_ranks
    return slice(rank * local, (rank + 1) * local)


def rank_inputs(step: int, rank: int, num_ranks: int):
    """(values, row splits) of both id lists and the upstream gradients of `rank`'s share."""
    ids, keys, upstream = batches[step]
    s = share(rank, num_ranks)
    parts = []
    for rows in (ids[s], keys[s]):
        ragged = tf.ragged.constant([list(r) for r in rows], dtype=tf.int64, ragged_rank=1)
        parts += [ragged.values, ragged.row_splits]
    return (*parts, tf.constant(upstream[:, s]))


def rank_step(ids, id_splits, keys, key_splits, upstream):
    sp_ids = [
        tf.RaggedTensor.from_row_splits(ids, id_splits),
        tf.RaggedTensor.from_row_splits(keys, key_splits),
    ]
    with tf.GradientTape() as tape:
        outs = sok.lookup_sparse(tables, sp_ids, combiners=["sum", "mean"])
        loss = tf.add_n([tf.reduce_sum(o * u) for o, u in zip(outs, tf.unstack(upstream))])
    grads = tape.gradient(loss, tables)
    with sok.OptimizerScope(tables):
        optimizer.apply_gradients(zip(grads, tables))
    return loss


@tf.function
def train_step(*inputs):
    if strategy is None:
        return rank_step(*inputs)
    return strategy.reduce("SUM", strategy.run(rank_step, args=inputs), axis=None)


for step in range(STEPS):
    if strategy is None:
        inputs = rank_inputs(step, 0, 1)
    else:
        n = strategy.num_replicas_in_sync
        per_replica = [rank_inputs(step, rank, n) for rank in range(n)]  # all local
        inputs = [
            strategy.experimental_distribute_values_from_function(
                lambda ctx, i=i, parts=per_replica: parts[ctx.replica_id_in_sync_group][i]
            )
            for i in range(5)
        ]
    train_step(*inputs)

ranks = getattr(static, "ranks", (0,))
arrays = {}
for rank, shard in zip(ranks, shards_of(static)):
    arrays[f"static@{rank}"] = shard.numpy()
for rank, shard in zip(ranks, shards_of(dynamic)):
    keys, values = shard.export()
    arrays[f"keys@{rank}"], arrays[f"values@{rank}"] = keys.numpy(), values.numpy()
np.savez(out_dir / "tables.npz", **arrays)
# The tier files while the tables live (they go with the tables at exit).
tiers = sorted(str(p.relative_to(out_dir)) for p in (out_dir / "tier").glob("*/rows.bin"))
(out_dir / "tiers.json").write_text(json.dumps(tiers))
