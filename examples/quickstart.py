"""Quickstart: two embedding tables, one fused lookup, a sparse gradient and an SGD step.

Run with `make demo` (or `python examples/quickstart.py` inside the set-up environment).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import sok_lite as sok  # noqa: E402


def main():
    sok.init()  # one process: no communication at all
    print(
        f"sok_lite {sok.__version__} on TensorFlow {tf.__version__}: rank {sok.rank()} of "
        f"{sok.num_ranks()}"
    )

    users = sok.Variable(np.arange(17 * 3).reshape(17, 3), dtype=tf.float32, name="users")
    items = sok.Variable(np.arange(7 * 5).reshape(7, 5), dtype=tf.float32, name="items")

    # A batch of two samples: variable-length ids per feature (RaggedTensor or SparseTensor).
    user_ids = tf.ragged.constant([[1, 1], [3, 4, 5]], dtype=tf.int64)
    item_ids = tf.ragged.constant([[1], [2, 3]], dtype=tf.int32).to_sparse()

    with tf.GradientTape() as tape:
        u, i = sok.lookup_sparse([users, items], [user_ids, item_ids], combiners=["sum", "mean"])
        loss = tf.reduce_sum(u)
    print("users, combiner sum  ->", u.numpy().tolist())
    print("items, combiner mean ->", i.numpy().tolist())

    grad = tape.gradient(loss, users)
    print(f"gradient of users: {type(grad).__name__} with one row per unique id")
    for row, value in zip(grad.indices.numpy(), grad.values.numpy()):
        print(f"  row {row}: {value.tolist()}")

    # The sparse gradient updates only the rows that were looked up.
    users.scatter_sub(tf.IndexedSlices(0.1 * grad.values, grad.indices))
    print("users[1] after one SGD step (lr 0.1):", users[1].numpy().tolist())

    try:
        sok.lookup_sparse(users, tf.ragged.constant([[17]], dtype=tf.int64))
    except tf.errors.InvalidArgumentError as e:
        print("bad id ->", e.message)


if __name__ == "__main__":
    main()
