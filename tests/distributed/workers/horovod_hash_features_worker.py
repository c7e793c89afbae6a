"""STEPS steps of model.fit on a Keras model with hash-table features (hash_features_model.py),
on this Horovod rank's share of each global batch. Writes the rank's table rows and the dense
weights for tests/distributed/test_horovod_hash_features.py.

Arguments: the output directory, then optionally a Keras dtype policy (default "float32") and
an optimizer, "adam" (default, learning rate 0.05) or "sgd" (0.1)."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "examples" / "dlrm"))

import horovod.tensorflow as hvd  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from parallel import DenseAllReduceOptimizer, broadcast_dense_weights  # noqa: E402

import sok_lite as sok  # noqa: E402
from tests.distributed.workers import hash_features_model as setup  # noqa: E402
from tests.distributed.workers.report import Report  # noqa: E402

hvd.init()
sok.init("horovod")
rank, num_ranks = hvd.rank(), hvd.size()
out_dir = pathlib.Path(sys.argv[1])
args = sys.argv[2:]
policy = args[0] if args else "float32"
optimizer = args[1] if len(args) > 1 else "adam"
keras.mixed_precision.set_global_policy(policy)
inner = keras.optimizers.Adam(0.05) if optimizer == "adam" else keras.optimizers.SGD(0.1)

model = setup.build_model()
broadcast_dense_weights(model, hvd)
model.compile(
    optimizer=DenseAllReduceOptimizer(inner, hvd),
    loss=keras.losses.MeanSquaredError(),
)
history = model.fit(
    setup.rank_dataset(rank, num_ranks), epochs=1, steps_per_epoch=setup.STEPS, verbose=0
)

tables = model.get_layer("features").tables
report = Report(out_dir, rank)
report.check(len(tables))
np.savez(out_dir / f"tables{rank}.npz", **setup.table_arrays(tables, lambda t: [(rank, t)]))
_, dense = sok.filter_variables(model.weights)
np.savez(out_dir / f"dense{rank}.npz", *[w.numpy() for w in dense])
report.write(
    num_ranks=num_ranks,
    iterations=int(model.optimizer.iterations.numpy()),
    optimizer=type(model.optimizer).__name__,
)
