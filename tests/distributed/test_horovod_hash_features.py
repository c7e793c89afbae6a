"""model.fit of a Keras model with hash-table features on 2 Horovod ranks ends up as on 1, under
the float32 and the mixed_float16 policy."""

from tests.distributed.launcher import run_ranks
from tests.distributed.trained_tables import assert_same_training

TABLES = 3  # the model's tables; each rank checks each of them


def test_fit_with_hash_features_on_two_ranks_equals_one(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    run_ranks("horovod_hash_features_worker.py", 1, one, checks=TABLES)
    reports = run_ranks("horovod_hash_features_worker.py", 2, two, checks=TABLES)
    assert [r["iterations"] for r in reports] == [3, 3]
    assert_same_training(two, one, num_ranks=2, tables=TABLES, dense=4)


# Under mixed_float16 the dense gradients are float16 sums: 2 ranks round two half-batch sums,
# one process one whole-batch sum, so a gradient entry may differ by float16's rounding
# (2**-11 relative, |gradient| < 1 here). SGD (learning rate 0.1) turns that into at most
# 3 steps * 0.1 * 2**-11 = 1.5e-4 per weight (measured: 3.4e-5; the table rows agree to 1e-9).
# A loss scaled twice too much moves rows and weights by 2e-3 to 4e-2 more.
FLOAT16_TOLERANCE = dict(rtol=0, atol=3 * 0.1 * 2**-11)


def test_fit_under_mixed_float16_on_two_ranks_equals_one(tmp_path):
    """compile wraps DenseAllReduceOptimizer in a LossScaleOptimizer, which must keep its
    1 / num_ranks loss scaling."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    run_ranks("horovod_hash_features_worker.py", 1, one, "mixed_float16", "sgd", checks=TABLES)
    reports = run_ranks(
        "horovod_hash_features_worker.py", 2, two, "mixed_float16", "sgd", checks=TABLES
    )
    assert [r["optimizer"] for r in reports] == ["LossScaleOptimizer"] * 2
    assert [r["iterations"] for r in reports] == [3, 3]
    assert_same_training(two, one, num_ranks=2, tables=TABLES, dense=4, tolerance=FLOAT16_TOLERANCE)
