"""NumPy float32 references of the CUDA kernels, mirroring kernels/core term by term.

Sums run in the same order as the CPU code (position by position within a sample), so the
forward pass can be compared tightly; only the backward's atomics reorder additions.
"""

import importlib.util
from pathlib import Path

import numpy as np

F32 = np.float32


def sample_of_positions(row_splits):
    counts = np.diff(row_splits)
    return np.repeat(np.arange(counts.size), counts)


def sample_scales(row_splits, weights, combiner):
    counts = np.diff(row_splits)
    starts = row_splits[:-1]
    if combiner == "sum":
        return np.ones(counts.size, F32)
    denom = np.zeros(counts.size, F32)
    for j in range(int(counts.max(initial=0))):
        live = counts > j
        w = weights[starts[live] + j] if weights is not None else np.ones(live.sum(), F32)
        denom[live] += w if combiner == "mean" else w * w
    if combiner == "sqrtn":
        denom = np.sqrt(denom)
    scale = np.zeros_like(denom)
    nonzero = denom != 0
    scale[nonzero] = F32(1) / denom[nonzero]
    return scale


def combine_forward(rows, inverse, row_splits, weights, scale):
    counts = np.diff(row_splits)
    starts = row_splits[:-1]
    out = np.zeros((counts.size, rows.shape[1]), F32)
    for j in range(int(counts.max(initial=0))):
        live = counts > j
        k = starts[live] + j
        w = weights[k] if weights is not None else np.ones(k.size, F32)
        out[live] += w[:, None] * rows[inverse[k]]
    return out * scale[:, None]


def combine_backward(grad_out, inverse, row_splits, weights, scale, num_unique):
    """In float64: the GPU's summation order is not fixed, so compare with a tolerance."""
    sample = sample_of_positions(row_splits)
    w = weights if weights is not None else np.ones(inverse.size, F32)
    factor = (w * scale[sample]).astype(np.float64)
    grad_rows = np.zeros((num_unique, grad_out.shape[1]), np.float64)
    np.add.at(grad_rows, inverse, factor[:, None] * grad_out[sample])
    return grad_rows


# (kind, params, number of slots); params (after lr and weight decay) as documented on
# sok_lite::OptimizerKind: every kernel kind and option.
OPTIMIZER_CASES = [
    ("sgd", [], 0),
    ("momentum", [0.9], 1),
    ("nesterov", [0.9], 1),
    ("adam", [0.9, 0.999, 1e-7, 3], 2),
    ("amsgrad", [0.9, 0.999, 1e-7, 5], 3),
    ("adagrad", [1e-7, 0], 1),
    ("adagrad", [1e-3, 1], 1),
    ("rmsprop", [0.9, 0.0, 1e-7, 0, 0], 1),
    ("rmsprop", [0.9, 0.5, 1e-7, 0, 0], 2),
    ("rmsprop", [0.9, 0.0, 1e-7, 1, 0], 2),
    ("rmsprop", [0.9, 0.5, 1e-7, 1, 0], 3),
    ("rmsprop", [0.9, 0.0, 1e-3, 0, 1], 1),
    ("rmsprop", [0.9, 0.0, 1e-3, 1, 1], 2),
    ("ftrl", [-0.5, 0.01, 0.02, 0.1, 0.0], 2),
    ("ftrl", [-0.5, 0.0, 0.0, 0.0, 0.05], 2),
    ("adamax", [0.9, 0.999, 1e-7, 3], 2),
    ("adadelta", [0.95, 1e-7], 2),
]


def apply_rows(kind, lr, wd, p, rows, grads, var, slots):
    """Updates var and slots (float32 NumPy arrays) in place, as core ApplyRows."""
    lr, wd = F32(lr), F32(wd)
    p = [F32(x) for x in p]
    w = var[rows]
    s = [slot[rows] for slot in slots]
    g = grads
    if wd != 0:
        w = w - w * wd * lr
    if kind == "sgd":
        w = w - g * lr
    elif kind in ("momentum", "nesterov"):
        mu = p[0]
        s[0] = s[0] * mu - g * lr
        w = w + (s[0] * mu - g * lr if kind == "nesterov" else s[0])
    elif kind in ("adam", "amsgrad"):
        step = p[3]
        alpha = lr * np.sqrt(F32(1) - np.power(p[1], step)) / (F32(1) - np.power(p[0], step))
        s[0] = s[0] + (g - s[0]) * (F32(1) - p[0])
        s[1] = s[1] + (g * g - s[1]) * (F32(1) - p[1])
        denom_v = s[1]
        if kind == "amsgrad":
            s[2] = np.maximum(s[2], s[1])
            denom_v = s[2]
        w = w - (s[0] * alpha) / (np.sqrt(denom_v) + p[2])
    elif kind == "adagrad":
        s[0] = s[0] + g * g
        if p[1] != 0:  # eps_outside: tf_keras legacy
            w = w - (lr * g) / (np.sqrt(s[0]) + p[0])
        else:
            w = w - (lr * g) / np.sqrt(s[0] + p[0])
    elif kind == "rmsprop":
        rho, mu, eps = p[0], p[1], p[2]
        momentum, centered = p[1] > 0, p[3] != 0
        s[0] = rho * s[0] + (F32(1) - rho) * (g * g)
        denom = s[0]
        if centered:
            a = len(s) - 1
            s[a] = rho * s[a] + (F32(1) - rho) * g
            denom = s[0] - s[a] * s[a]
        if p[4] != 0:  # eps_outside: tf_keras legacy without momentum
            inc = (lr * g) / (np.sqrt(denom) + eps)
        else:
            inc = (lr * g) / np.sqrt(denom + eps)
        if momentum:
            s[1] = mu * s[1] + inc
            w = w - s[1]
        else:
            w = w - inc
    elif kind == "ftrl":
        lr_power, l1, shrink = p[0], p[1], p[4]
        l2 = p[2] + p[3] / (F32(2) * lr)
        accum, linear = s
        grad_to_use = g + F32(2) * shrink * w
        new_accum = accum + g * g
        new_pow = np.power(new_accum, -lr_power)
        linear = linear + grad_to_use - (new_pow - np.power(accum, -lr_power)) / lr * w
        quadratic = new_pow / lr + F32(2) * l2
        clipped = np.minimum(np.maximum(linear, -l1), l1)
        w = (clipped - linear) / quadratic
        s = [new_accum, linear]
    elif kind == "adamax":
        b2, eps = p[1], p[2]
        bias = F32(1) - np.power(p[0], p[3])
        s[0] = s[0] + (g - s[0]) * (F32(1) - p[0])
        s[1] = np.maximum(b2 * s[1], np.abs(g))
        w = w - (lr * s[0]) / (bias * (s[1] + eps))
    elif kind == "adadelta":
        rho, eps = p[0], p[1]
        s[0] = rho * s[0] + (F32(1) - rho) * (g * g)
        delta = -((np.sqrt(s[1] + eps) * g) / np.sqrt(s[0] + eps))
        s[1] = rho * s[1] + (F32(1) - rho) * (delta * delta)
        w = w + lr * delta
    else:
        raise ValueError(kind)
    var[rows] = w
    for slot, value in zip(slots, s):
        slot[rows] = value


# --- ids, owners, initial rows (kernels/core/lookup_unique.cc, exchange.*, row_init.cc) -----------

U64 = np.uint64


def _load_key_hash():
    # By path: importing the sok_lite package would import TensorFlow, which GPU checks lack.
    # The source tree's, or (tests run against an installed wheel) the installed package's,
    # found without importing it.
    path = Path(__file__).resolve().parents[2] / "sok_lite" / "tables" / "key_hash.py"
    if not path.exists():
        package = importlib.util.find_spec("sok_lite")
        path = Path(package.submodule_search_locations[0]) / "tables" / "key_hash.py"
    spec = importlib.util.spec_from_file_location("key_hash", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_key_hash = _load_key_hash()
hash_owner = _key_hash.hash_owner


def splitmix(x):
    """splitmix64 step on a uint64 array (kernels/core/cpu_gpu_rules.h's SplitMix64)."""
    return _key_hash.splitmix64(np.atleast_1d(np.asarray(x, dtype=U64)))


def unique_ids(ids):
    """(unique in first-occurrence order, inverse int32, counts int32), as core UniqueIds."""
    values, first, inverse, counts = np.unique(
        ids, return_index=True, return_inverse=True, return_counts=True
    )
    order = np.argsort(first, kind="stable")
    renumber = np.empty_like(order)
    renumber[order] = np.arange(order.size)
    return values[order], renumber[inverse].astype(np.int32), counts[order].astype(np.int32)


def owner_of(owner, ids, num_ranks):
    if owner == -1:
        return _key_hash.row_owner(ids, num_ranks), _key_hash.local_row(ids, num_ranks)
    if owner == -2:
        return hash_owner(ids, num_ranks), ids
    return np.full(ids.size, owner, np.int64), ids


def partition_by_owner(uniques, owners, num_ranks):
    """(counts, message, splits, send_pos) exactly as core PartitionByOwner."""
    num_tables = len(uniques)
    placed = [owner_of(o, u, num_ranks) for o, u in zip(owners, uniques)]
    counts = np.zeros(num_ranks * num_tables, np.int64)
    message, send_pos, splits = [], [], []
    for r in range(num_ranks):
        per_table = [np.flatnonzero(ranks == r) for ranks, _ in placed]
        counts[r * num_tables : (r + 1) * num_tables] = [p.size for p in per_table]
        message.extend(p.size for p in per_table)
        for (_, local), picked in zip(placed, per_table):
            message.extend(local[picked])
            send_pos.extend(picked)
        splits.append(num_tables + sum(p.size for p in per_table))
    return (
        counts,
        np.asarray(message, np.int64),
        np.asarray(splits, np.int64),
        np.asarray(send_pos, np.int32),
    )


INIT_KINDS = {"random_normal": 0, "truncated_normal": 1, "random_uniform": 2, "constant": 3}


def _uniform(seed, ids, cols, draw):
    s = splitmix(U64(seed))
    h = splitmix(s ^ ids.view(U64))
    h = splitmix(h ^ (cols.astype(U64) * U64(0x100000001B3)) ^ (draw.astype(U64) << U64(40)))
    return ((h >> U64(11)).astype(np.float64) + 0.5) * (1.0 / 9007199254740992.0)


def _normal(seed, ids, cols, draw):
    u1 = _uniform(seed, ids, cols, 2 * draw)
    u2 = _uniform(seed, ids, cols, 2 * draw + 1)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2)


def init_rows(kind, seed, a, b, ids, dim):
    """[n, dim] float32 initial rows, as core InitRows."""
    ids = np.asarray(ids, np.int64)
    grid_ids = np.repeat(ids, dim)
    cols = np.tile(np.arange(dim, dtype=np.int64), ids.size)
    zero = np.zeros(grid_ids.size, np.int64)
    if kind == "random_normal":
        v = a + b * _normal(seed, grid_ids, cols, zero)
    elif kind == "truncated_normal":
        z = _normal(seed, grid_ids, cols, zero)
        draw = zero.copy()
        while True:
            redo = np.abs(z) > 2.0
            if not redo.any():
                break
            draw[redo] += 1
            z[redo] = _normal(seed, grid_ids[redo], cols[redo], draw[redo])
        v = a + b * z
    elif kind == "random_uniform":
        v = a + (b - a) * _uniform(seed, grid_ids, cols, zero)
    else:
        v = np.full(grid_ids.size, a)
    return v.astype(F32).reshape(ids.size, dim)


def table_rows_since(state, keys, updated, values, slots, since_step, with_slots):
    """Core HashTable::ForEach on a device table's arrays: {key: row} of the present slots
    changed after since_step (INT64_MIN: every one), rows laid out value then each slot."""
    present = state == 2
    if since_step != np.iinfo(np.int64).min:
        present &= updated > since_step
    parts = [values] + (list(slots) if with_slots else [])
    rows = np.concatenate(parts, axis=1)
    return {int(k): rows[p] for p, k in zip(np.flatnonzero(present), keys[present])}
