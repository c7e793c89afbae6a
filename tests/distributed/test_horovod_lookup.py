"""lookup_sparse on real Horovod ranks (horovodrun --gloo), against TF's single-process lookup."""

import pytest

from tests.distributed.launcher import run_ranks


@pytest.mark.parametrize("np_", [1, 2])
def test_lookup_on_ranks_matches_single_process(tmp_path, np_):
    reports = run_ranks("lookup_worker.py", np_, tmp_path, checks=20)
    assert [r["num_ranks"] for r in reports] == [np_] * np_
