"""The inputs a sok_lite Keras model takes under MirroredStrategy and MultiWorkerMirroredStrategy
(docs/distributed.md, "Inputs under a strategy")."""

import functools
import json

import numpy as np
import pytest

from tests.distributed.strategy_launcher import run_workers


@functools.cache  # one run of each kind serves every test
def findings(kind: str, workers: int) -> list[dict]:
    outputs = run_workers("strategy_inputs_worker.py", workers, kind)
    return [json.loads(out.strip().splitlines()[-1]) for out in outputs]


@pytest.mark.parametrize("kind, workers", [("mirrored", 0), ("multi_worker", 2)])
def test_ragged_and_sparse_inputs_are_refused_when_the_model_is_built(kind, workers):
    for found in findings(kind, workers):
        assert found["replicas"] == 2
        for composite in ("ragged", "sparse"):
            message = found[composite]
            assert f"a {composite} keras.Input cannot be fed to model.fit" in message, message
            assert "with 2 replicas" in message and "pad_value=-1" in message, message


def test_dense_padded_ids_train_with_fit_under_mirrored_strategy():
    (found,) = findings("mirrored", 0)
    losses = found["fit_losses"]
    assert len(losses) == 2 and np.all(np.isfinite(losses)), losses
