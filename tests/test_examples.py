"""The examples run end to end (in reduced size) and reach what they promise."""

import importlib.util
import pathlib
import re
import subprocess
import sys

import numpy as np

from tests.distributed.launcher import run_ranks

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def test_sparse_linear():
    args = ["--features", "1000", "--train-rows", "20000", "--test-rows", "10000"]
    args += ["--steps", "150", "--batch", "512"]
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "sparse_linear.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = re.search(r"test AUC ([0-9.]+)\s+oracle AUC ([0-9.]+)", proc.stdout)
    assert found, proc.stdout
    model_auc, oracle_auc = float(found.group(1)), float(found.group(2))
    assert oracle_auc > 0.75  # the planted model separates the classes
    assert abs(model_auc - oracle_auc) < 0.05, proc.stdout


def run_example(script, *args, timeout=300):
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


# The classic demo with narrower dense layers (the default 1024 units take longer to run).
DEMO_ARGS = ["--steps", "80", "--dense_units", "256", "--print_every", "1"]


def assert_loss_decreases(losses):
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    assert last < first - 0.1, losses


def test_sok_classic_demo_loss_decreases():
    stdout = run_example("sok_classic_demo.py", *DEMO_ARGS)
    losses = [float(x) for x in re.findall(r"step +\d+ +loss ([0-9.]+)", stdout)]
    assert len(losses) == 80, stdout
    assert_loss_decreases(losses)


def test_sok_classic_demo_on_two_ranks_loss_decreases(tmp_path):
    reports = run_ranks("sok_demo_worker.py", 2, tmp_path, *DEMO_ARGS)
    # The printed loss is the global one (summed over ranks): the same on both.
    assert reports[0]["losses"] == reports[1]["losses"]
    assert_loss_decreases(reports[0]["losses"])


def load_dlrm_module(name):
    """examples/dlrm/<name>.py as a module, without putting examples/dlrm on sys.path."""
    spec = importlib.util.spec_from_file_location(f"dlrm_{name}", EXAMPLES / "dlrm" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dlrm_data_is_the_same_for_any_split_of_the_batch():
    data_module, auc = load_dlrm_module("data"), load_dlrm_module("metrics").auc
    CriteoLike, vocabulary_sizes = data_module.CriteoLike, data_module.vocabulary_sizes

    vocab = vocabulary_sizes(10**7)
    assert len(vocab) == 26 and vocab[0] == 10 and vocab[-1] == 10**7
    data = CriteoLike(vocab, seed=3)
    whole = data.batch(step=5, global_batch=12)
    parts = [data.batch(step=5, global_batch=12, rank=r, num_ranks=3) for r in range(3)]
    for key in ("dense", "categorical"):
        joined = np.concatenate([p.features[key] for p in parts])
        np.testing.assert_array_equal(joined, whole.features[key])
    np.testing.assert_array_equal(np.concatenate([p.labels for p in parts]), whole.labels)
    ids = whole.features["categorical"]
    assert ids.min() >= 0 and (ids < np.array(vocab)).all()
    held_out = data.samples(np.arange(20_000), "eval")
    assert not np.array_equal(held_out.labels[:12], whole.labels)
    assert 0.75 < auc(held_out.labels, held_out.probabilities) < 0.95
    # AUC counts ties as one half, as a brute-force pair count does.
    labels, scores = np.array([1, 0, 1, 0, 1]), np.array([0.3, 0.3, 0.9, 0.1, 0.2])
    pairs = [(p, n) for p in scores[labels == 1] for n in scores[labels == 0]]
    wins = [1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs]
    assert auc(labels, scores) == np.mean(wins)


DLRM_ARGS = ["--max-vocabulary", "10000", "--global-batch", "2048", "--eval-samples", "16384"]


def test_dlrm_reaches_the_oracle_auc():
    stdout = run_example("dlrm/train.py", *DLRM_ARGS, "--epochs", "2", "--steps-per-epoch", "100")
    found = re.search(r"final AUC ([0-9.]+)\s+oracle AUC ([0-9.]+)", stdout)
    assert found, stdout
    model_auc, oracle_auc = float(found.group(1)), float(found.group(2))
    assert oracle_auc > 0.8
    assert oracle_auc - model_auc < 0.05, stdout


def test_dlrm_on_two_ranks_takes_the_same_steps_as_on_one(tmp_path):
    args = [*DLRM_ARGS, "--epochs", "1", "--steps-per-epoch", "10", "--global-batch", "512"]
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = run_ranks("dlrm_worker.py", 1, tmp_path / "one", *args)
    two = run_ranks("dlrm_worker.py", 2, tmp_path / "two", *args)
    assert [r["num_ranks"] for r in one + two] == [1, 2, 2]
    # Global losses of the same global batches: equal up to float32 summation order.
    np.testing.assert_allclose(two[0]["step_losses"], one[0]["step_losses"], rtol=1e-4)
    assert two[0]["step_losses"] == two[1]["step_losses"]
    assert len(one[0]["step_losses"]) == 10
