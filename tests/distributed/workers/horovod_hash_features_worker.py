"""STEPS Adam steps of model.fit on a Keras model with hash-table features
(hash_features_model.py), on this Horovod rank's share of each global batch. Writes the rank's
table rows and the dense weights for tests/distributed/test_horovod_hash_features.py."""

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

model = setup.build_model()
broadcast_dense_weights(model, hvd)
model.compile(
    optimizer=DenseAllReduceOptimizer(keras.optimizers.Adam(0.05), hvd),
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
report.write(num_ranks=num_ranks, iterations=int(model.optimizer.iterations.numpy()))
