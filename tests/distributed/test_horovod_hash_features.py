"""model.fit of a Keras model with hash-table features on 2 Horovod ranks ends up as on 1."""

from tests.distributed.hash_features_check import assert_same_training
from tests.distributed.launcher import run_ranks


def test_fit_with_hash_features_on_two_ranks_equals_one(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    run_ranks("horovod_hash_features_worker.py", 1, one)
    reports = run_ranks("horovod_hash_features_worker.py", 2, two)
    assert [r["iterations"] for r in reports] == [3, 3]
    assert_same_training(two, one, num_ranks=2)
