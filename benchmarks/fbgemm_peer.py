"""A table's training step, lookup + backward + optimizer: sok_lite against FBGEMM's CPU
table-batched embedding (SplitTableBatchedEmbeddingBagsCodegen, optimizer fused into backward).

Both sides get the same table (1M x 64 float32 rows by default, the same initial values) and
the same batches of ids (16,384 samples x 10 Zipf(1.2) ids, summed). Ours is sok.Variable +
sok.lookup_sparse + a Keras optimizer under sok.OptimizerScope in a tf.function; FBGEMM's runs
in a second process (PyTorch and TensorFlow do not share one), started once and kept warm, in
the virtualenv that `make fbgemm-venv` builds (.venv-fbgemm: torch and fbgemm-gpu-cpu from the
package registry, ~5 GB; not part of `make test`). Blocks of steps alternate between the two
processes, so drift in machine load affects both alike; each side's figure is the median of its
blocks' median step.

Usage: python benchmarks/fbgemm_peer.py [--peer-python .venv-fbgemm/bin/python]
         [--optimizers sgd adagrad adam] [--rows 1000000] [--dim 64] [--batch 16384]
         [--hotness 10] [--rounds 6] [--iters 20] [--json PATH]
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from common import time_steps  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
# Keras name -> FBGEMM's OptimType member, and hyper-parameters both sides take alike.
OPTIMIZERS = {
    "sgd": ("EXACT_SGD", {}),
    "adagrad": ("EXACT_ADAGRAD", {"eps": 1e-7}),
    "adam": ("ADAM", {"eps": 1e-7, "beta1": 0.9, "beta2": 0.999}),
}
LEARNING_RATE = 0.01


def workload(args, directory: pathlib.Path):
    """Writes the table's initial rows and the batches' ids where the peer reads them."""
    from common import zipf_ids

    rng = np.random.default_rng(0)
    table = rng.standard_normal([args.rows, args.dim], dtype=np.float32) * 0.05
    ids = [
        zipf_ids(rng, args.batch * args.hotness, args.rows).reshape(args.batch, args.hotness)
        for _ in range(args.batches)
    ]
    upstream = rng.standard_normal([args.batch, args.dim], dtype=np.float32)
    np.save(directory / "table.npy", table)
    np.savez(directory / "batches.npz", ids=np.stack(ids), upstream=upstream)
    return table, ids, upstream


# -- ours (TensorFlow) ---------------------------------------------------------------------------


def our_step(table_init, ids, upstream, optimizer: str):
    import keras
    import tensorflow as tf

    import sok_lite as sok

    table = sok.Variable(table_init)
    lr = LEARNING_RATE
    opt = {
        "sgd": lambda: keras.optimizers.SGD(lr),
        "adagrad": lambda: keras.optimizers.Adagrad(lr, initial_accumulator_value=0.0),
        "adam": lambda: keras.optimizers.Adam(lr),
    }[optimizer]()
    batches = [tf.constant(b.astype(np.int64)) for b in ids]
    up = tf.constant(upstream)

    @tf.function
    def step(batch):
        with tf.GradientTape() as tape:
            out = sok.lookup_sparse(table, batch, combiners="sum")
            loss = tf.reduce_sum(out * up)
        grad = tape.gradient(loss, table)
        with sok.OptimizerScope([table]):
            opt.apply_gradients([(grad, table)])
        return opt.iterations

    state = {"i": 0}

    def call():
        step(batches[state["i"] % len(batches)]).numpy()
        state["i"] += 1

    return call


# -- FBGEMM's (PyTorch, in the peer process) -----------------------------------------------------


def peer_main(directory: pathlib.Path, optimizer: str) -> None:
    """Reads `steps N` lines on stdin, answers each with the median ms of N steps (JSON)."""
    import torch
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
        EmbeddingLocation,
        PoolingMode,
    )
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        OptimType,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    torch.set_num_threads(os.cpu_count())
    table = np.load(directory / "table.npy")
    data = np.load(directory / "batches.npz")
    rows, dim = table.shape
    name, hyper = OPTIMIZERS[optimizer]
    try:
        emb = SplitTableBatchedEmbeddingBagsCodegen(
            embedding_specs=[(rows, dim, EmbeddingLocation.HOST, ComputeDevice.CPU)],
            optimizer=getattr(OptimType, name),
            learning_rate=LEARNING_RATE,
            pooling_mode=PoolingMode.SUM,
            **hyper,
        )
        emb.split_embedding_weights()[0].copy_(torch.from_numpy(table))
        batch, hotness = data["ids"].shape[1:]
        offsets = torch.arange(0, batch * hotness + 1, hotness, dtype=torch.int64)
        batches = [torch.from_numpy(b.reshape(-1).astype(np.int64)) for b in data["ids"]]
        upstream = torch.from_numpy(data["upstream"])
        emb(batches[0], offsets).backward(upstream)  # fails here if CPU lacks the optimizer
    except Exception as e:  # noqa: BLE001 - reported to the parent, which prints it
        print(json.dumps({"unsupported": f"{type(e).__name__}: {e}"[:300]}), flush=True)
        return
    state = {"i": 0}

    def step():
        emb(batches[state["i"] % len(batches)], offsets).backward(upstream)
        state["i"] += 1

    print(json.dumps({"ready": torch.__version__}), flush=True)
    for line in sys.stdin:
        iters = int(line.split()[1])
        print(json.dumps({"ms": time_steps([step], warmup=0, iters=iters)[0]}), flush=True)


class Peer:
    def __init__(self, python: str, directory: pathlib.Path, optimizer: str):
        self.proc = subprocess.Popen(
            [python, __file__, "--child", str(directory), "--optimizers", optimizer],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=HERE,
        )
        self.hello = self._answer()

    def _answer(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the FBGEMM process ended; see its error above")
        return json.loads(line)

    def block(self, iters: int) -> float:
        self.proc.stdin.write(f"steps {iters}\n")
        self.proc.stdin.flush()
        return self._answer()["ms"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--peer-python", default=str(HERE.parent / ".venv-fbgemm" / "bin" / "python"))
    p.add_argument("--optimizers", nargs="+", default=list(OPTIMIZERS), choices=list(OPTIMIZERS))
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=16_384)
    p.add_argument("--hotness", type=int, default=10)
    p.add_argument("--batches", type=int, default=8, help="distinct batches, cycled")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--iters", type=int, default=20, help="steps per block")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        peer_main(pathlib.Path(args.child), args.optimizers[0])
        return
    if not pathlib.Path(args.peer_python).exists():
        sys.exit(f"no {args.peer_python}: build the FBGEMM virtualenv first (make fbgemm-venv)")
    from common import memory_setting

    print(memory_setting())
    results = {}
    with tempfile.TemporaryDirectory(prefix="fbgemm_peer_") as tmp:
        directory = pathlib.Path(tmp)
        table, ids, upstream = workload(args, directory)
        unique = int(np.mean([len(np.unique(b)) for b in ids]))
        print(
            f"table {args.rows:,} x {args.dim} float32, batch {args.batch:,} x {args.hotness} "
            f"Zipf(1.2) ids (~{unique:,} distinct), sum, lookup + backward + update, "
            f"{os.cpu_count()} cores"
        )
        for optimizer in args.optimizers:
            peer = Peer(args.peer_python, directory, optimizer)
            if "unsupported" in peer.hello:
                print(f"  {optimizer:8s} FBGEMM (CPU): not supported ({peer.hello['unsupported']})")
                results[optimizer] = {"unsupported": peer.hello["unsupported"]}
                peer.close()
                continue
            ours = our_step(table, ids, upstream, optimizer)
            for _ in range(3):  # warm-up: tracing, first touches of the rows and slots
                ours()
            peer.block(3)
            ours_ms, peer_ms = [], []
            for _ in range(args.rounds):
                ours_ms.append(time_steps([ours], warmup=0, iters=args.iters)[0])
                peer_ms.append(peer.block(args.iters))
            peer.close()
            o, f = float(np.median(ours_ms)), float(np.median(peer_ms))
            print(
                f"  {optimizer:8s} FBGEMM {f:8.2f} ms   sok_lite {o:8.2f} ms   "
                f"FBGEMM / sok_lite {f / o:.2f}x   (torch {peer.hello['ready']})"
            )
            results[optimizer] = {
                "fbgemm_ms": f,
                "sok_lite_ms": o,
                "ratio": f / o,
                "torch": peer.hello["ready"],
            }
    if args.json:
        setup = {
            k: getattr(args, k) for k in ("rows", "dim", "batch", "hotness", "rounds", "iters")
        }
        setup.update(memory=memory_setting(), distinct_ids=unique)
        pathlib.Path(args.json).write_text(
            json.dumps({"benchmark": "fbgemm_peer", **setup, "results": results}, indent=1)
        )


if __name__ == "__main__":
    main()
