"""A DynamicVariable with a disk tier on 2 Horovod ranks (each rank its own tier) equals a RAM
table on 1 rank, and its dump reloads on 1 rank into a tiered table; with sok.prefetch of each
next batch it trains to the same bits with fewer misses."""

import numpy as np

from tests.distributed.launcher import run_ranks
from tests.distributed.test_horovod_dynamic import merged

# Each rank checks every key it stores: the keys the training run creates, split by owner.
KEYS, KEYS_PER_RANK = 1558, [795, 763]


def test_tiered_two_ranks_equal_ram_one_rank_and_reload(tmp_path):
    one, two, back = tmp_path / "one", tmp_path / "two", tmp_path / "back"
    for d in (one, two, back):
        d.mkdir()
    ckpt = str(tmp_path / "ckpt")
    run_ranks("tiered_worker.py", 1, one, "train", "ram", "", checks=KEYS)
    reports = run_ranks("tiered_worker.py", 2, two, "train", "disk", ckpt, checks=KEYS_PER_RANK)
    assert all(r["rows_disk"] > 0 for r in reports), reports
    a, b = merged(one, 1), merged(two, 2)
    assert sorted(a) == sorted(b) and len(a) > 1000
    for key in a:
        # Summation order of gradients differs between 1 and 2 ranks: float32 round-off.
        np.testing.assert_allclose(b[key], a[key], rtol=1e-5, atol=1e-6, err_msg=f"key {key}")
    run_ranks("tiered_worker.py", 1, back, "load", "disk", ckpt, checks=KEYS)
    c = merged(back, 1)
    assert sorted(c) == sorted(b)
    for key in b:
        np.testing.assert_array_equal(c[key], b[key], err_msg=f"key {key}")


def test_prefetch_on_two_ranks_trains_to_the_same_bits(tmp_path):
    plain, ahead = tmp_path / "plain", tmp_path / "ahead"
    for d in (plain, ahead):
        d.mkdir()
    without = run_ranks("tiered_worker.py", 2, plain, "train", "disk", "", checks=KEYS_PER_RANK)
    read = run_ranks("tiered_worker.py", 2, ahead, "train", "prefetch", "", checks=KEYS_PER_RANK)
    a, b = merged(plain, 2), merged(ahead, 2)
    assert sorted(a) == sorted(b) and len(a) > 1000
    for key in a:
        np.testing.assert_array_equal(b[key], a[key], err_msg=f"key {key}")
    for rank in range(2):  # each rank read back rows of its own keys
        assert read[rank]["read"] > 0, read
        assert read[rank]["misses"] < without[rank]["misses"], (without, read)
