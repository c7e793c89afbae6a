"""SOK first-API layers (All2AllDenseEmbedding, DistributedEmbedding) on 2 Horovod ranks."""

from tests.distributed.launcher import run_ranks


def test_sok_layers_on_two_ranks_match_numpy_on_the_whole_table(tmp_path):
    reports = run_ranks("sok_v1_worker.py", 2, tmp_path, checks=4)
    assert [r["num_ranks"] for r in reports] == [2, 2]
    assert all(r["checks"] == 4 for r in reports)
