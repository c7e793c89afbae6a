"""DynamicVariable with storage=sok.storage.Disk: a RAM budget 4x smaller than the table, rows
spilled to a file and read back. Held to a RAM-only DynamicVariable given the same keys and
steps: identical values and slots (bit for bit, the tier only moves records), and the same
export, evict, size and min_count behaviour; dumps reload into either kind at any world size."""

import os
import re
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.tables.table_kind import MEMORY_STATS

DIM = 64
POOL = 4000  # keys drawn from
STEPS = 30
# Per RAM row: 128 (Adagrad, Ftrl) or 192 (Adam) floats + ~91 bytes of bookkeeping and index;
# per row on disk ~20 bytes of index. The RAM table of ~2,300 rows takes 4x this budget or more.
BUDGET = "400KiB"


def init():
    return keras.initializers.RandomNormal(stddev=0.1, seed=5)


def make_pair(tmp_path, name, **kw):
    disk = sok.storage.Disk(tmp_path / "tier", ram_budget=kw.pop("budget", BUDGET))
    ram = sok.DynamicVariable(DIM, initializer=init(), name=f"{name}_ram", **kw)
    tiered = sok.DynamicVariable(DIM, initializer=init(), name=name, storage=disk, **kw)
    return ram, tiered


def batches(seed, steps, batch=64):
    rng = np.random.default_rng(seed)
    for step in range(steps):
        # A hot range drifting through the key space plus uniform cold keys, large int64s.
        hot = rng.integers(step * 40, step * 40 + 300, (batch, 2)) % POOL
        cold = rng.integers(0, POOL, (batch, 1))
        ids = np.concatenate([hot, cold], axis=1) * 7919 + 2**40
        yield tf.ragged.constant(ids.tolist(), dtype=tf.int64)


def train_step(table, optimizer, ids):
    with tf.GradientTape() as tape:
        out = sok.lookup_sparse(table, ids, combiners="mean")
        loss = tf.reduce_sum(tf.square(out - 0.3))
    grads = tape.gradient(loss, [table])
    with sok.OptimizerScope([table]):
        optimizer.apply_gradients(zip(grads, [table]))
    return out


def sorted_rows(table, with_slots=True, since_step=None):
    keys, rows = table.export(with_slots=with_slots, since_step=since_step)
    keys, rows = keys.numpy(), rows.numpy()
    order = np.argsort(keys)
    return keys[order], rows[order]


def assert_identical(ram, tiered, **kw):
    ka, ra = sorted_rows(ram, **kw)
    kb, rb = sorted_rows(tiered, **kw)
    np.testing.assert_array_equal(ka, kb)
    np.testing.assert_array_equal(ra, rb)


OPTIMIZERS = {
    "adam": lambda: keras.optimizers.Adam(0.01),
    "adagrad": lambda: keras.optimizers.Adagrad(0.05),
    "ftrl": lambda: keras.optimizers.Ftrl(0.05, l1_regularization_strength=0.001),
}


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_tiered_training_equals_ram_table(tmp_path, opt):
    ram, tiered = make_pair(tmp_path, f"t_{opt}")
    opt_ram, opt_tiered = OPTIMIZERS[opt](), OPTIMIZERS[opt]()
    for ids in batches(0, STEPS):
        out_ram = train_step(ram, opt_ram, ids)
        out_tiered = train_step(tiered, opt_tiered, ids)
        np.testing.assert_array_equal(out_ram.numpy(), out_tiered.numpy())
    assert_identical(ram, tiered)
    assert int(ram.size()) == int(tiered.size())
    stats = tiered.memory_stats()
    assert stats["rows_disk"] > 2 * stats["rows_ram"] > 0, stats
    assert ram.memory_stats()["bytes_ram"] >= 4 * stats["ram_budget"]
    assert stats["spills"] > 0 and stats["misses"] > 0 and stats["hits"] > 0, stats
    assert stats["rows_ram"] + stats["rows_disk"] == int(tiered.size())
    assert stats["ram_budget"] == 400 << 10
    assert os.path.getsize(tmp_path / "tier" / f"t_{opt}.rank0" / "rows.bin") >= stats["bytes_disk"]
    ram_stats = ram.memory_stats()
    assert ram_stats["ram_budget"] is None and ram_stats["rows_disk"] == ram_stats["spills"] == 0
    assert set(stats) == set(ram_stats) == set(MEMORY_STATS)
    assert all(isinstance(v, int) for v in stats.values() if v is not None)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_16bit_tiered_table_equals_16bit_ram_table(tmp_path, dtype):
    # Records with 16-bit values move between the tiers as they are, so the bits stay those of
    # the RAM table; a dump reads them a piece at a time and widens them as export does.
    # One name for both: it seeds bfloat16's stochastic rounding.
    name = f"half_{dtype.name}"
    disk = sok.storage.Disk(tmp_path / "tier", ram_budget=BUDGET)
    ram = sok.DynamicVariable(DIM, initializer=init(), name=name, dtype=dtype)
    tiered = sok.DynamicVariable(DIM, initializer=init(), name=name, dtype=dtype, storage=disk)
    opt_ram, opt_tiered = keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01)
    for ids in batches(6, 12):
        out_ram = train_step(ram, opt_ram, ids)
        out_tiered = train_step(tiered, opt_tiered, ids)
        np.testing.assert_array_equal(out_ram.numpy(), out_tiered.numpy())
    assert_identical(ram, tiered)
    assert tiered.memory_stats()["rows_disk"] > 0
    sok.dump(tmp_path / "ck", [tiered], opt_tiered)
    restored = sok.DynamicVariable(DIM, initializer=init(), name=name, dtype=dtype)
    sok.load(tmp_path / "ck", [restored], keras.optimizers.Adam(0.01))
    assert_identical(ram, restored)


def test_export_assign_evict_min_count(tmp_path):
    ram, tiered = make_pair(tmp_path, "maint", min_count=2)
    opt_ram, opt_tiered = keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01)
    for ids in batches(1, 10):
        train_step(ram, opt_ram, ids)
        train_step(tiered, opt_tiered, ids)
    assert_identical(ram, tiered)
    assert_identical(ram, tiered, since_step=6)
    assert_identical(ram, tiered, with_slots=False)
    keys = np.concatenate([sorted_rows(ram)[0][::5], np.arange(-50, 0)])
    rows = np.random.default_rng(2).standard_normal((keys.size, 3 * DIM)).astype(np.float32)
    for t in (ram, tiered):
        t.assign(keys, rows, with_slots=True)
        t.assign(keys[::2], rows[::2, :DIM] * 3)
    assert_identical(ram, tiered)
    assert int(ram.evict(4)) == int(tiered.evict(4)) > 0
    assert_identical(ram, tiered)
    assert tiered.memory_stats()["evictions"] > 0
    for ids in batches(3, 3):
        train_step(ram, opt_ram, ids)
        train_step(tiered, opt_tiered, ids)
    assert_identical(ram, tiered)


@pytest.mark.parametrize("target", ["ram", "tiered"])
def test_dump_from_tiered_loads_anywhere(tmp_path, target):
    ram, tiered = make_pair(tmp_path, f"dump_{target}")
    opt_ram, opt_tiered = keras.optimizers.Adagrad(0.05), keras.optimizers.Adagrad(0.05)
    data = list(batches(4, 8))
    for ids in data[:5]:
        train_step(ram, opt_ram, ids)
        train_step(tiered, opt_tiered, ids)
    sok.dump(tmp_path / "base", [tiered], opt_tiered)
    for ids in data[5:]:
        train_step(ram, opt_ram, ids)
        train_step(tiered, opt_tiered, ids)
    sok.dump(tmp_path / "inc", [tiered], opt_tiered, since_step=5)
    disk = sok.storage.Disk(tmp_path / "tier2", ram_budget=BUDGET)
    extra = {"storage": disk} if target == "tiered" else {}
    restored = sok.DynamicVariable(DIM, initializer=init(), name=f"restored_{target}", **extra)
    opt_restored = keras.optimizers.Adagrad(0.05)
    sok.load([tmp_path / "base", tmp_path / "inc"], [restored], opt_restored)
    assert_identical(ram, restored)
    ids = next(batches(9, 1))
    np.testing.assert_array_equal(
        train_step(ram, opt_ram, ids).numpy(), train_step(restored, opt_restored, ids).numpy()
    )
    assert_identical(ram, restored)
    if target == "tiered":
        assert restored.memory_stats()["rows_disk"] > 0


def test_dump_reads_the_table_a_piece_at_a_time(tmp_path, monkeypatch):
    ram, tiered = make_pair(tmp_path, "pieces")
    opt = keras.optimizers.Adam(0.01)
    for ids in batches(5, 6):
        train_step(tiered, opt, ids)
    calls = []
    real = sok.ops.hash_table_ops.export_range

    def spy(handle, cursor, limit, *args):
        calls.append(limit)
        return real(handle, cursor, limit, *args)

    monkeypatch.setattr(sok.ops.hash_table_ops, "export_range", spy)
    monkeypatch.setattr(sok.checkpoint, "CHUNK_ROWS", 200)
    monkeypatch.setattr(sok.ops.hash_table_ops, "export", None)  # never the whole table
    sok.dump(tmp_path / "ck", [tiered], opt)
    assert len(calls) >= int(tiered.size()) // 200 and set(calls) == {200}
    monkeypatch.undo()
    restored = sok.DynamicVariable(DIM, initializer=init(), name="pieces_back")
    sok.load(tmp_path / "ck", [restored], keras.optimizers.Adam(0.01))
    assert_identical(tiered, restored)


def test_unwritable_path_names_table_and_path(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ValueError, match=r"DynamicVariable 'clicks': cannot use '.*file.*"):
        sok.DynamicVariable(4, name="clicks", storage=sok.storage.Disk(tmp_path / "file", 1 << 20))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"capacity": 100}, "capacity drops rows"),
        ({"storage": "/tmp/x"}, "storage must be None or sok.storage.Disk"),
    ],
)
def test_bad_storage_arguments(tmp_path, kwargs, match):
    kwargs.setdefault("storage", sok.storage.Disk(tmp_path, "1MiB"))
    with pytest.raises(ValueError, match=match):
        sok.DynamicVariable(4, name="bad", **kwargs)


@pytest.mark.parametrize(
    "budget, expected",
    [("2GiB", 2 << 30), ("512MiB", 512 << 20), ("1.5KB", 1500), (4096, 4096), ("7", 7)],
)
def test_budget_strings(budget, expected):
    assert sok.storage.Disk("/tmp/x", budget).ram_budget == expected


@pytest.mark.parametrize("budget", ["2 parsecs", 0, -5, True, None, "GiB"])
def test_bad_budgets(budget):
    with pytest.raises(ValueError, match="ram_budget"):
        sok.storage.Disk("/tmp/x", budget)


def test_batch_larger_than_budget_is_an_error(tmp_path):
    table = sok.DynamicVariable(
        DIM, name="tiny", storage=sok.storage.Disk(tmp_path, ram_budget="8KiB")
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"'tiny'.*ram_budget 8192 bytes"):
        sok.lookup_sparse(table, tf.ragged.constant([list(range(500))], dtype=tf.int64))


def test_corrupted_tier_file_is_an_error(tmp_path):
    table = sok.DynamicVariable(
        DIM,
        initializer=init(),
        name="corrupt",
        storage=sok.storage.Disk(tmp_path, ram_budget=BUDGET),
    )
    opt = keras.optimizers.Adam(0.01)
    for ids in batches(6, 6):
        train_step(table, opt, ids)
    path = tmp_path / "corrupt.rank0" / "rows.bin"
    data = bytearray(path.read_bytes())
    for off in range(64, len(data), 1001):
        data[off] ^= 0xFF
    path.write_bytes(bytes(data))
    bad = r"'corrupt'.*disk tier file .*corrupted"
    with pytest.raises(tf.errors.InvalidArgumentError, match=bad):
        table.export()
    with pytest.raises(tf.errors.InvalidArgumentError, match="corrupted"):
        for ids in batches(6, 6):
            train_step(table, opt, ids)


DISK_FULL = """
import resource, signal
import keras, numpy as np, tensorflow as tf
import sok_lite as sok
from tests.ops.dynamic.test_tiered_table import DIM, batches, init, train_step, sorted_rows
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
disk = sok.storage.Disk({tier!r}, ram_budget="400KiB")
table = sok.DynamicVariable(DIM, initializer=init(), name="full", storage=disk)
opt = keras.optimizers.Adam(0.01)
data = list(batches(7, 12))
for ids in data[:4]:
    train_step(table, opt, ids)
limit = table.memory_stats()["bytes_disk"] + 4096
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
before = sorted_rows(table)
try:
    for ids in data[4:]:
        before = sorted_rows(table)
        if {prefetch!r}:  # a prefetch of the batch first: it never raises
            sok.prefetch(table, ids, wait_for_lookup=False)
        train_step(table, opt, ids)
    print("NO ERROR")
except tf.errors.InvalidArgumentError as e:
    print("ERROR", e.message.splitlines()[0])
after = sorted_rows(table)
# The failing lookup changed no row: every row of before is still there, bit for bit.
pos = np.searchsorted(after[0], before[0])
ok = np.array_equal(after[0][pos], before[0]) and np.array_equal(after[1][pos], before[1])
print("INTACT", ok, before[0].size)
"""


def assert_disk_full_fails_the_step_and_loses_no_row(tmp_path, prefetch: bool) -> None:
    """Trains a tiered table in a process whose file size limit the tier file reaches (with a
    prefetch of each batch before its step, or not): the step that needs room fails naming
    the table, and every row before it is still there."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    code = DISK_FULL.format(tier=str(tmp_path / "tier"), prefetch=prefetch)
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ERROR" in done.stdout and "'full'" in done.stdout, done.stdout
    assert "File too large" in done.stdout, done.stdout
    assert "INTACT True" in done.stdout, done.stdout


def test_disk_full_is_an_error_and_loses_no_row(tmp_path):
    assert_disk_full_fails_the_step_and_loses_no_row(tmp_path, prefetch=False)


CRASH = """
import os, signal, sys
import keras, numpy as np
import sok_lite as sok
from tests.ops.dynamic.test_tiered_table import DIM, batches, init, sorted_rows, train_step
mode, root = sys.argv[1], sys.argv[2]
disk = sok.storage.Disk(root + "/tier", ram_budget="400KiB")
table = sok.DynamicVariable(DIM, initializer=init(), name="crash", storage=disk)
opt = keras.optimizers.Adam(0.01)
data = list(batches(8, 10))
if mode == "crash":
    for ids in data[:6]:
        train_step(table, opt, ids)
    sok.dump(root + "/ckpt", [table], opt)
    for ids in data[6:8]:
        train_step(table, opt, ids)
    os.kill(os.getpid(), signal.SIGKILL)  # mid-run: the tier file is left as it was
sok.load(root + "/ckpt", [table], opt)
for ids in data[6:]:
    train_step(table, opt, ids)
keys, rows = sorted_rows(table)
np.savez(root + "/resumed.npz", keys=keys, rows=rows)
"""


def test_killed_run_resumes_from_its_dump(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def run(mode):
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(CRASH), mode, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=root,
            env=env,
        )

    crashed = run("crash")
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    resumed = run("resume")  # a new process: same table name and path, a fresh tier
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # The uninterrupted run, in this process: RAM table, all ten steps.
    table = sok.DynamicVariable(DIM, initializer=init(), name="uninterrupted")
    opt = keras.optimizers.Adam(0.01)
    for ids in batches(8, 10):
        train_step(table, opt, ids)
    keys, rows = sorted_rows(table)
    got = np.load(tmp_path / "resumed.npz")
    np.testing.assert_array_equal(got["keys"], keys)
    np.testing.assert_array_equal(got["rows"], rows)


def test_export_saved_model_reads_both_tiers(tmp_path):
    ram, tiered = make_pair(tmp_path, "served")
    opt_ram, opt_tiered = keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01)
    data = list(batches(10, 8))
    for ids in data:
        train_step(ram, opt_ram, ids)
        train_step(tiered, opt_tiered, ids)
    assert tiered.memory_stats()["rows_disk"] > 0

    def predict(values, splits):
        ids = tf.RaggedTensor.from_row_splits(values, splits)
        return sok.lookup_sparse(tiered, ids, combiners="sum")

    spec = [tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.int64)]
    sok.export_saved_model(predict, tmp_path / "served", spec, tables=[tiered])
    serve = tf.saved_model.load(str(tmp_path / "served")).signatures["serving_default"]
    ids = data[0]  # every key stored, most of them on disk
    served = list(serve(values=ids.values, splits=ids.row_splits).values())[0].numpy()
    expected = sok.lookup_sparse(ram, ids, combiners="sum").numpy()
    np.testing.assert_allclose(served, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dim", [1, 3, 5])
def test_narrow_rows_round_trip_through_the_file(tmp_path, dim):
    # Records of up to 7 words end past their checksum word, which the checksum skips.
    disk = sok.storage.Disk(tmp_path, ram_budget="24KiB")
    tiered = sok.DynamicVariable(dim, initializer=init(), name=f"narrow{dim}", storage=disk)
    ram = sok.DynamicVariable(dim, initializer=init(), name=f"narrow{dim}_ram")
    for start in range(0, 600, 50):
        ids = tf.ragged.constant([[k] for k in range(start, start + 50)], dtype=tf.int64)
        for table in (ram, tiered):
            sok.lookup_sparse(table, ids)
    assert tiered.memory_stats()["rows_disk"] > 0
    assert_identical(ram, tiered)


def _fill_until_the_budget_runs_out(table, batch=500, limit=200):
    """Looks up fresh keys a batch at a time until the disk index leaves no room for one batch;
    the error's message."""
    for start in range(0, batch * limit, batch):
        ids = tf.ragged.constant([[k] for k in range(start, start + batch)], dtype=tf.int64)
        try:
            sok.lookup_sparse(table, ids)
        except tf.errors.InvalidArgumentError as e:
            return e.message
    raise AssertionError(f"{batch * limit} keys fit in {table.memory_stats()['ram_budget']}")


def test_budget_taken_by_the_disk_index_is_an_error_counting_the_keys_on_disk(tmp_path):
    disk = sok.storage.Disk(tmp_path, ram_budget="256KiB")
    table = sok.DynamicVariable(16, name="filled", storage=disk)
    message = _fill_until_the_budget_runs_out(table)
    stats = table.memory_stats()
    on_disk = re.search(r"the index of the ([0-9,]+) keys on disk takes ([0-9,]+) bytes", message)
    assert on_disk, message
    assert int(on_disk.group(1).replace(",", "")) == stats["rows_disk"] > 0
    index = int(on_disk.group(2).replace(",", ""))
    assert stats["ram_budget"] // 2 < index < stats["ram_budget"]
    needed = re.search(r"a ram_budget of ([0-9,]+) bytes", message)
    assert needed and int(needed.group(1).replace(",", "")) > stats["ram_budget"], message
    # The budget named holds the keys stored and the batch that failed.
    budget = int(needed.group(1).replace(",", ""))
    roomy = sok.DynamicVariable(
        16, name="roomy", storage=sok.storage.Disk(tmp_path / "roomy", ram_budget=budget)
    )
    keys = stats["rows_ram"] + stats["rows_disk"] + 500
    for start in range(0, keys, 500):
        ids = tf.ragged.constant([[k] for k in range(start, start + 500)], dtype=tf.int64)
        sok.lookup_sparse(roomy, ids)


INDEX_WARNING = """
import sok_lite as sok, tensorflow as tf
from tests.ops.dynamic.test_tiered_table import _fill_until_the_budget_runs_out
table = sok.DynamicVariable(16, name="warned", storage=sok.storage.Disk({tier!r}, "256KiB"))
_fill_until_the_budget_runs_out(table)
print("DONE", flush=True)
"""


def test_disk_index_past_half_the_budget_warns_once(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"
    done = subprocess.run(
        [sys.executable, "-c", INDEX_WARNING.format(tier=str(tmp_path))],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env=env,
    )
    assert done.returncode == 0 and "DONE" in done.stdout, done.stderr[-3000:]
    warned = [line for line in done.stderr.splitlines() if "past half of it" in line]
    assert len(warned) == 1, done.stderr[-3000:]
    assert "warned.rank0" in warned[0] and "ram_budget 262144 bytes" in warned[0], warned
    assert "bytes a key" in warned[0], warned
    # Ahead of the lookup that found the budget too small.
    stored = int(re.search(r"keys are stored \(now ([0-9]+);", warned[0]).group(1))
    failed = re.search(r"charged for each of the ([0-9]+) keys stored", done.stderr)
    assert failed and stored < int(failed.group(1)), done.stderr[-3000:]


def test_first_optimizer_step_spills_the_rows_wider_rows_leave_over_the_budget(tmp_path):
    # Rows stored by lookups alone have no slots; Adam's first step widens each by two slots
    # (3x the bytes), and the rows the budget no longer holds go to disk in that step.
    table = sok.DynamicVariable(
        DIM, initializer=init(), name="widened", storage=sok.storage.Disk(tmp_path, "4MiB")
    )
    for start in range(0, 30000, 2000):
        keys = [[k] for k in range(start, start + 2000)]
        sok.lookup_sparse(table, tf.ragged.constant(keys, dtype=tf.int64))
    narrow = table.memory_stats()
    train_step(table, keras.optimizers.Adam(0.01), tf.ragged.constant([[1], [2]], tf.int64))
    wide = table.memory_stats()
    assert wide["rows_ram"] * 2 < narrow["rows_ram"], (narrow, wide)
    # What a RAM row takes with its slots, chunks allocated 1,024 rows at a time: within one
    # chunk of the budget (786 KiB here).
    assert wide["bytes_ram"] <= 4 * 2**20 + 1024 * DIM * 3 * 4, wide
    assert wide["rows_ram"] + wide["rows_disk"] == 30000
