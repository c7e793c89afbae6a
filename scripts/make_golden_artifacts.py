"""Writes the golden artifacts of this release under tests/data/golden/<version>/.

    .venv/bin/python scripts/make_golden_artifacts.py [--version v0.1] [--out DIR]

Trains the small deterministic model of tests/checkpoint/test_golden_artifacts.py
(`build_model`: a fixed-size feature and three hash-table features, one stored in bfloat16,
one with a disk tier) for a few steps, then writes every kind of file sok_lite saves and
`expected.npz`, what each must reproduce when loaded (the test's docstring has the details).
An existing version folder is never rewritten: a release that changes what it writes adds a new
version (and the definitions its test needs).
"""

import argparse
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import sok_lite as sok  # noqa: E402
from tests.checkpoint import test_golden_artifacts as golden  # noqa: E402

README = """# Golden artifacts {version}

Written by `scripts/make_golden_artifacts.py` with sok_lite {sok_version}, TensorFlow
{tf_version}, Keras {keras_version} (Python {python}, {machine}, 1 process, CPU kernels).
`tests/checkpoint/test_golden_artifacts.py` loads each file with today's code and checks it
against `expected.npz`; it also defines the model they were written from (`build_model`).

| file | what it is |
|---|---|
| `model.keras` | `model.save()`: config, weights and optimizer state of the trained model |
| `model.weights.h5` | `model.save_weights()` of the same model |
| `tf_checkpoint/ckpt.*` | `tf.train.Checkpoint(model=model, optimizer=model.optimizer).write()` |
| `dump/` | `sok.dump(path, tables, model.optimizer)`: the tables with their optimizer slots |
| `saved_model/` | `sok.export_saved_model`: serves `predictions` without sok_lite |
| `expected.npz` | fixed input ids and what every file above must give for them (below) |

`expected.npz`: `probe/<feature>`, the input ids; `predictions` and `lookup/<feature>`, the
model's outputs and the lookup results for them; `table/<name>/...`, every table's rows (hash
tables: `keys` and `rows`, value then optimizer slots, sorted by key; the static table: `value`
and `slot/<slot>`); `iterations`, the optimizer's step.

The tiered feature's `storage` is recorded as the relative path `{tier_path}`: a loaded model
puts its tier files under `<working directory>/{tier_path}/`.

Never regenerate this folder: files written by a later release go to a new version folder,
`scripts/make_golden_artifacts.py --version <new>`, next to this one.
"""


def write(out: Path) -> None:
    keras.utils.set_random_seed(0)
    model = golden.build_model()
    model.fit(golden.training_data(), epochs=1, verbose=0, shuffle=False)
    tier = model.get_layer("features").tables["tiered"].memory_stats()
    assert tier["rows_disk"] > 0, f"the tier kept every row in RAM: {tier}"

    tables = list(model.get_layer("features").tables.values())
    expected = golden.table_state(model)  # before the probe stores its new keys
    expected["iterations"] = np.int64(model.optimizer.iterations.numpy())
    model.save(out / "model.keras")
    model.save_weights(out / "model.weights.h5")
    tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(
        str(out / "tf_checkpoint" / "ckpt")
    )
    sok.dump(out / "dump", tables, model.optimizer)

    def predict(item, user, query, tiered):
        return model({"item": item, "user": user, "query": query, "tiered": tiered})

    spec = [tf.TensorSpec([None, golden.SLOTS[f]], tf.int64) for f in golden.FEATURES]
    sok.export_saved_model(predict, out / "saved_model", spec, tables=tables)

    probe = golden.probe_inputs()
    expected |= {f"probe/{f}": v for f, v in probe.items()}
    expected |= golden.outputs(model, {f: tf.constant(v) for f, v in probe.items()})
    np.savez(out / "expected.npz", **expected)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--version", default=golden.VERSION)
    parser.add_argument("--out", type=Path, help="default: tests/data/golden/<version>")
    args = parser.parse_args()
    out = (args.out or ROOT / "tests" / "data" / "golden" / args.version).resolve()
    if out.exists():
        sys.exit(f"{out} exists: golden artifacts are never rewritten, give a new --version")
    work = Path(tempfile.mkdtemp(prefix="golden-"))
    try:
        # The tier's relative path lands in the scratch directory, not in the checkout.
        os.chdir(work)
        (work / "out").mkdir()
        write(work / "out")
        readme = README.format(
            version=args.version,
            sok_version=sok.__version__,
            tf_version=tf.__version__,
            keras_version=keras.__version__,
            python=platform.python_version(),
            machine=platform.machine(),
            tier_path=golden.TIER_PATH,
        )
        (work / "out" / "README.md").write_text(readme)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(work / "out", out)
    finally:
        os.chdir(ROOT)
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
