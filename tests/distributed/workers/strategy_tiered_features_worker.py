"""The model of tests/keras/test_keras_tiered_features.py fitted twice under MirroredStrategy
(2 logical CPUs): with a disk tier under OUT_DIR/tier, with one under OUT_DIR/ahead fed through
sok.keras.prefetch_rows, and all in RAM. Writes each run's table rows per rank and dense weights
(tiered.npz, prefetched.npz, ram.npz) and the tiered tables' memory_stats() per rank
(stats.json: {"tiered" or "prefetched": {rank: stats}}).

    python strategy_tiered_features_worker.py OUT_DIR
"""

import json
import os
import pathlib
import sys

from tests.distributed.workers.strategy_setup import make_strategy

out_dir = pathlib.Path(sys.argv[1])
strategy = make_strategy("mirrored")  # before TensorFlow runs any op

import numpy as np  # noqa: E402

import sok_lite as sok  # noqa: E402
from tests.keras import test_keras_tiered_features as setup  # noqa: E402


def arrays(model) -> dict:
    out = {}
    for rank, shard in setup.shards_and_ranks(model.get_layer("features").tables["user"]):
        keys, rows = shard.export(with_slots=True)
        order = np.argsort(keys.numpy())
        out[f"user.keys@{rank}"] = keys.numpy()[order]
        out[f"user.rows@{rank}"] = rows.numpy()[order]
    for i, weight in enumerate(setup.dense_weights(model)):
        out[f"dense{i}"] = weight
    return out


with strategy.scope():
    sok.init()  # "auto": the strategy in scope
    disk = sok.storage.Disk(out_dir / "tier", ram_budget=setup.BUDGET)
    ahead = sok.storage.Disk(out_dir / "ahead", ram_budget=setup.BUDGET)
    models = {
        "tiered": setup.user_and_item_model(disk),
        "prefetched": setup.user_and_item_model(ahead),
        "ram": setup.user_and_item_model(),
    }
for name, model in models.items():
    data = setup.dataset()
    if name == "prefetched":  # each batch's rows read back one batch ahead, on every shard
        data = sok.keras.prefetch_rows(data, model.get_layer("features"))
    setup.fit(model, data)
    np.savez(out_dir / f"{name}.npz", **arrays(model))
stats = {}
for name in ("tiered", "prefetched"):
    table = models[name].get_layer("features").tables["user"]
    stats[name] = {rank: shard.memory_stats() for rank, shard in setup.shards_and_ranks(table)}
(out_dir / "stats.json").write_text(json.dumps(stats))
# The tier directories while the tables live (they go with the tables at exit).
(out_dir / "tiers.json").write_text(json.dumps(sorted(os.listdir(out_dir / "tier"))))
