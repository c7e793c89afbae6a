"""Compares what the hash-feature workers wrote (workers/hash_features_model.py) for a run on
several ranks with a run on one: hash-table rows per key, fixed-size tables, dense weights."""

import numpy as np

from tests.distributed.workers.hash_features_model import features

# Same global batches, so the same values up to float32 summation order; atol covers entries
# that Adam left near zero. Few steps (3): Adam lets round-off grow with every step, while one
# key looked up in the wrong row moves it by an Adam step (5e-2).
TOLERANCE = dict(rtol=1e-4, atol=1e-6)


def _shards(out_dir) -> dict:
    arrays = {}
    for path in sorted(out_dir.glob("tables*.npz")):
        with np.load(path) as saved:
            arrays.update({key: saved[key] for key in saved.files})
    return arrays


def global_tables(out_dir, num_ranks: int) -> dict:
    """{hash table: {key: row with slots}} and {fixed-size table: [rows, dim]} over all ranks."""
    arrays, tables = _shards(out_dir), {}
    for f in features():
        name = f.table_name
        if f.hashed:
            rows = {}
            for rank in range(num_ranks):
                keys, values = arrays[f"{name}.keys@{rank}"], arrays[f"{name}.rows@{rank}"]
                for key, row in zip(keys.tolist(), values):
                    assert key not in rows, f"table {name}: key {key} stored on two ranks"
                    rows[key] = row
            tables[name] = rows
        else:
            parts = [arrays[f"{name}@{rank}"] for rank in range(num_ranks)]
            table = np.zeros((sum(len(p) for p in parts), parts[0].shape[1]), np.float32)
            for rank, part in enumerate(parts):
                table[rank::num_ranks] = part  # row i on rank i % N
            tables[name] = table
    return tables


def assert_same_training(out_dir, reference_dir, num_ranks: int, tolerance=None) -> None:
    """Asserts that the run in out_dir on num_ranks ranks trained as the one-rank run in
    reference_dir did, to `tolerance` (assert_allclose's keywords; default TOLERANCE)."""
    tolerance = TOLERANCE if tolerance is None else tolerance
    tables, expected = global_tables(out_dir, num_ranks), global_tables(reference_dir, 1)
    for name, want in expected.items():
        got = tables[name]
        if isinstance(want, dict):
            assert sorted(got) == sorted(want) and len(want) >= 4, f"table {name}: other keys"
            for key in want:
                np.testing.assert_allclose(
                    got[key], want[key], **tolerance, err_msg=f"table {name}, key {key}"
                )
        else:
            np.testing.assert_allclose(got, want, **tolerance, err_msg=f"table {name}")
    with np.load(out_dir / "dense0.npz") as dense, np.load(reference_dir / "dense0.npz") as ref:
        assert len(dense.files) == len(ref.files) == 4
        for key in ref.files:
            np.testing.assert_allclose(dense[key], ref[key], **tolerance, err_msg=key)
