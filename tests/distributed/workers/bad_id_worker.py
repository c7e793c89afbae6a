"""Rank 1 looks up an id beyond the table: the job must fail fast, naming the table."""

import sys

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

import sok_lite as sok

hvd.init()
sok.init("horovod")
table = sok.Variable(np.zeros([17, 3]), dtype=tf.float32, name="users")
bad = [[1, 2]] if hvd.rank() == 0 else [[3, 17]]
out = sok.lookup_sparse([table], [tf.ragged.constant(bad, dtype=tf.int64)])
print(f"rank {hvd.rank()} finished a lookup that should have failed", file=sys.stderr)
