"""Compares what a distributed run wrote (tables<process>.npz, dense<process>.npz) with what a
one-rank run wrote: hash-table rows per key, fixed-size tables, dense weights.

Table arrays are named "<table>@<rank>" for a fixed-size table's shard (row i on rank i % N)
and "<table>.keys@<rank>", "<table>.rows@<rank>" for a hash table's shard (see
workers/hash_features_model.py's table_arrays).
"""

import numpy as np

# Same global batches, so the same values up to float32 summation order; atol covers entries
# that Adam left near zero. The workers train few steps: Adam lets round-off grow with every
# step, while one key looked up in the wrong row moves it by an Adam step (1e-2 or more).
TOLERANCE = dict(rtol=1e-4, atol=1e-6)


def _shards(out_dir) -> dict[str, dict[int, np.ndarray]]:
    """{array name without "@<rank>": {rank: array}} over every process's tables file."""
    shards: dict[str, dict[int, np.ndarray]] = {}
    for path in sorted(out_dir.glob("tables*.npz")):
        with np.load(path) as saved:
            for key in saved.files:
                name, rank = key.rsplit("@", 1)
                shards.setdefault(name, {})[int(rank)] = saved[key]
    return shards


def global_tables(out_dir, num_ranks: int) -> dict:
    """{hash table: {key: row with slots}} and {fixed-size table: [rows, dim]} over all ranks."""
    shards, tables = _shards(out_dir), {}
    for name, parts in shards.items():
        assert sorted(parts) == list(range(num_ranks)), f"{name}: shards of ranks {sorted(parts)}"
        if name.endswith(".rows"):
            continue  # read with its keys
        if name.endswith(".keys"):
            table, rows = name.removesuffix(".keys"), {}
            for rank in range(num_ranks):
                values = shards[f"{table}.rows"][rank]
                for key, row in zip(parts[rank].tolist(), values, strict=True):
                    assert key not in rows, f"table {table}: key {key} stored on two ranks"
                    rows[key] = row
            tables[table] = rows
        else:
            table = np.zeros(
                (sum(len(p) for p in parts.values()), parts[0].shape[1]), parts[0].dtype
            )
            for rank, part in parts.items():
                table[rank::num_ranks] = part
            tables[name] = table
    return tables


def assert_same_training(
    out_dir, reference_dir, num_ranks: int, tables: int, dense: int, tolerance=None
) -> None:
    """Asserts that the run in out_dir on num_ranks ranks trained as the one-rank run in
    reference_dir did, to `tolerance` (assert_allclose's keywords; default TOLERANCE); both wrote
    `tables` tables and `dense` dense weights."""
    tolerance = TOLERANCE if tolerance is None else tolerance
    got_tables, expected = global_tables(out_dir, num_ranks), global_tables(reference_dir, 1)
    assert sorted(got_tables) == sorted(expected), (sorted(got_tables), sorted(expected))
    assert len(expected) == tables, f"{len(expected)} tables, expected {tables}"
    for name, want in expected.items():
        got = got_tables[name]
        if isinstance(want, dict):
            assert sorted(got) == sorted(want) and len(want) >= 4, f"table {name}: other keys"
            for key in want:
                np.testing.assert_allclose(
                    got[key], want[key], **tolerance, err_msg=f"table {name}, key {key}"
                )
        else:
            np.testing.assert_allclose(got, want, **tolerance, err_msg=f"table {name}")
    with np.load(out_dir / "dense0.npz") as got, np.load(reference_dir / "dense0.npz") as want:
        counts = len(got.files), len(want.files)
        assert counts == (dense, dense), f"dense weights {counts}, expected {dense} each"
        for key in want.files:
            np.testing.assert_allclose(got[key], want[key], **tolerance, err_msg=key)
