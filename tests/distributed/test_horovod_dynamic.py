"""DynamicVariable on 2 Horovod ranks equals 1 rank: initial rows, and after 50 Adam steps; a
bfloat16 table bit for bit (its stochastic rounding draws from the key, not the rank)."""

import ml_dtypes
import numpy as np
import pytest

from tests.distributed.launcher import run_ranks


def merged(out_dir, np_):
    """key -> row (value and slots) over all ranks; each key must live on exactly one rank."""
    result, sizes = {}, set()
    for r in range(np_):
        data = np.load(out_dir / f"arrays{r}.npz")
        sizes.add(int(data["size"]))
        for key, row in zip(data["keys"].tolist(), data["rows"]):
            assert key not in result, f"key {key} stored on two ranks"
            result[key] = row
    assert sizes == {len(result)}, "size() must count every rank's rows"
    return result


# Each rank checks every key it stores: (steps, keys on 1 rank, keys on each of 2 ranks).
KEYS_AFTER = [(1, 7, [1, 6]), (50, 8, [2, 6])]


@pytest.mark.parametrize("steps,keys,keys_per_rank", KEYS_AFTER, ids=["1", "50"])
def test_dynamic_table_on_two_ranks_equals_one(tmp_path, steps, keys, keys_per_rank):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    run_ranks("dynamic_worker.py", 1, one, str(steps), checks=keys)
    run_ranks("dynamic_worker.py", 2, two, str(steps), checks=keys_per_rank)
    a, b = merged(one, 1), merged(two, 2)
    assert sorted(a) == sorted(b) and len(a) >= 6
    for key in a:
        # Summation order of gradients differs between 1 and 2 ranks: float32 round-off.
        np.testing.assert_allclose(b[key], a[key], rtol=1e-5, atol=1e-6, err_msg=f"key {key}")
    per_rank = [len(np.load(two / f"arrays{r}.npz")["keys"]) for r in range(2)]
    assert min(per_rank) > 0, f"keys not spread over ranks: {per_rank}"


def test_bfloat16_dynamic_table_on_two_ranks_equals_one_bit_for_bit(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    run_ranks("dynamic_worker.py", 1, one, "20", "bfloat16", checks=8)
    run_ranks("dynamic_worker.py", 2, two, "20", "bfloat16", checks=[2, 6])
    a, b = merged(one, 1), merged(two, 2)
    assert sorted(a) == sorted(b) and len(a) >= 6
    for key in a:
        # Integer-valued gradients: the float32 math, and so the rounding, agree exactly.
        np.testing.assert_array_equal(b[key], a[key], err_msg=f"key {key}")
        value = a[key][:5]
        np.testing.assert_array_equal(value, value.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert all(a[key].shape == (15,) for key in a)  # value, then Adam's two float32 slots
    per_rank = [len(np.load(two / f"arrays{r}.npz")["keys"]) for r in range(2)]
    assert min(per_rank) > 0, f"keys not spread over ranks: {per_rank}"
