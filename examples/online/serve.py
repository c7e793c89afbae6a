"""The serving side of examples/online/train.py, in plain TensorFlow: it never imports sok_lite.

It loads the updatable SavedModel, applies the trainer's deltas as they appear (delta_updater,
copied next to the model by the trainer), and reports the served model's AUC on held-out data
and its lag after each poll, until the trainer says it is done and every delta is applied.

Usage (train.py starts it): python serve.py MODEL_DIR DELTA_DIR EVAL_NPZ DONE_FILE OUT_NPY
(it creates DONE_FILE.ready once it serves, and saves its last scores to OUT_NPY)
"""

import json
import os
import pathlib
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.modules["sok_lite"] = None  # this process serves without sok_lite: importing it fails

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (ties count one half)."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    _, first, counts = np.unique(scores[order], return_index=True, return_counts=True)
    ranks[order] = np.repeat(first + (counts + 1) / 2.0, counts)
    positives = labels.sum()
    negatives = len(labels) - positives
    return float(
        (ranks[labels > 0.5].sum() - positives * (positives + 1) / 2) / (positives * negatives)
    )


def main() -> None:
    model_dir, delta_dir, eval_npz, done_file, out_npy = sys.argv[1:6]
    sys.path.insert(0, model_dir)  # the trainer copied delta_updater.py there
    import delta_updater

    held_out = np.load(eval_npz)
    inputs = {k: tf.constant(held_out[k]) for k in ("values", "splits")}
    model = tf.saved_model.load(model_dir)
    serve = model.signatures["serving_default"]
    updater = delta_updater.DeltaUpdater(model, delta_dir)

    def report(applied):
        scores = serve(**inputs)["output_0"].numpy().reshape(-1)
        status = updater.status()
        line = {
            "applied": applied,
            "sequence": status["sequence"],
            "step": status["step"],
            "auc": round(auc(held_out["labels"], scores), 4),
            "lag_deltas": status["lag_deltas"],
            "lag_seconds": round(status["lag_seconds"], 3),
        }
        print("served " + json.dumps(line), flush=True)
        return scores

    report([])
    pathlib.Path(done_file + ".ready").touch()
    while True:
        done = pathlib.Path(done_file).exists()  # read before the poll: nothing comes after
        applied = updater.poll()
        if applied:
            report(applied)
        if updater.status()["error"]:
            raise SystemExit(f"updater: {updater.status()['error']}")
        if done and updater.status()["lag_deltas"] == 0:
            break
        time.sleep(0.2)
    np.save(out_npy, report([]))


if __name__ == "__main__":
    main()
