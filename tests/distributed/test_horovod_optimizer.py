"""The same Adam training run on 2 Horovod ranks and on 1 gives the same tables and slots, for
float32 tables and for bfloat16 tables, whose stochastic rounding draws from global rows."""

import numpy as np
import pytest

from tests.distributed.launcher import run_ranks

SLOTS = 4  # each rank checks every Adam slot (m and v) of its 2 tables


def global_arrays(out_dir, np_):
    """Reassembles each array from the ranks' shards (users: distributed; items: on the last)."""
    shards = [dict(np.load(out_dir / f"arrays{r}.npz")) for r in range(np_)]
    result = {}
    for key in shards[0]:
        if key.startswith("table0"):  # row i on rank i % N at local row i // N
            rows = sum(len(s[key]) for s in shards)
            full = np.zeros((rows,) + shards[0][key].shape[1:], np.float32)
            for r, s in enumerate(shards):
                full[r::np_] = s[key]
            result[key] = full
        else:
            result[key] = shards[-1][key]
            assert all(len(s[key]) == 0 for s in shards[:-1]), key
    return result


def test_adam_run_on_two_ranks_equals_one_rank(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    run_ranks("optimizer_worker.py", 1, one, checks=SLOTS)
    run_ranks("optimizer_worker.py", 2, two, checks=SLOTS)
    a, b = global_arrays(one, 1), global_arrays(two, 2)
    assert sorted(a) == sorted(b) and {"table0_m", "table0_v", "table1_m"} <= set(a)
    for key in a:
        # Summation order differs between 1 and 2 ranks (owner-side sums): float32 round-off.
        np.testing.assert_allclose(b[key], a[key], rtol=1e-5, atol=1e-6, err_msg=key)
    assert np.count_nonzero(a["table0_m"]) > 0 and np.count_nonzero(a["table1_v"]) > 0


@pytest.mark.parametrize("slot_dtype", ["float32", "bfloat16"], ids=["f32_slots", "bf16_slots"])
def test_bfloat16_tables_on_two_ranks_equal_one_rank_bit_for_bit(slot_dtype, tmp_path):
    """bfloat16 slots too: their rounding also draws from global rows."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    run_ranks("optimizer_worker.py", 1, one, "bfloat16", slot_dtype, checks=SLOTS)
    run_ranks("optimizer_worker.py", 2, two, "bfloat16", slot_dtype, checks=SLOTS)
    a, b = global_arrays(one, 1), global_arrays(two, 2)
    assert sorted(a) == sorted(b) and {"table0_m", "table0_v", "table1_m"} <= set(a)
    for key in a:
        # Integer-valued gradients: the float32 math, and so the rounding, agree exactly.
        np.testing.assert_array_equal(b[key], a[key], err_msg=key)
    assert np.count_nonzero(a["table0_m"]) > 0
