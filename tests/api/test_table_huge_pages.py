"""Huge-page advice for static tables and their slots (kernels/core/huge_pages.h): given before
a buffer is first written, for new tables and slots, for whole-table assigns and checkpoint
restores, and for the private copy an update makes of a shared buffer; values never change.

What is checked is the advice (the "hg" flag of the mappings in /proc/self/smaps), not whether the
kernel found free 2 MiB pages, which depends on the machine's memory. A freed buffer's mapping may
stay (and stay advised) for the next one, depending on the machine's allocator, so most checks
look at the mappings under the buffer itself (its address from DLPack), not at how the process's
advised bytes grew."""

import ctypes
import gc
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.optim.slots import get_slots, updated_since

try:
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:  # NumPy 1
    from numpy.core.multiarray import _set_madvise_hugepage

pytestmark = pytest.mark.skipif(
    not pathlib.Path("/sys/kernel/mm/transparent_hugepage").is_dir()
    or os.environ.get("SOK_LITE_HUGE_PAGES") == "0"
    or "glibc.malloc.hugetlb" in os.environ.get("GLIBC_TUNABLES", ""),
    reason="Linux with transparent huge pages, advice on, malloc not advising every block",
)

ROWS, DIM = 160_000, 64  # 41 MB of float32: above the 32 MiB threshold
MIB = 1 << 20


@pytest.fixture(autouse=True)
def _collected():
    """Buffers of earlier tests freed first, and NumPy's own advice of its large arrays off: a
    mapping NumPy advised and freed could hold a buffer sok_lite did not advise."""
    numpy_advised = _set_madvise_hugepage(False)
    gc.collect()
    yield
    gc.collect()
    _set_madvise_hugepage(numpy_advised)


def advised_ranges() -> list[tuple[int, int]]:
    """[begin, end) of this process's mappings advised for huge pages."""
    ranges, span = [], (0, 0)
    for line in pathlib.Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            span = tuple(int(x, 16) for x in head.split("-"))
        elif line.startswith("VmFlags:") and " hg" in f" {line[8:]}":
            ranges.append(span)
    return ranges


def advised_bytes() -> int:
    """Bytes of this process's mappings advised for huge pages."""
    return sum(end - begin for begin, end in advised_ranges())


def address(value) -> int:
    """Where the buffer of a tensor or variable (its current value, not a copy) starts."""
    capsule = tf.experimental.dlpack.to_dlpack(tf.convert_to_tensor(value))
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return ctypes.c_void_p.from_address(get(capsule, b"dltensor")).value  # DLTensor.data


def is_advised(value) -> bool:
    """Whether the 2 MiB-aligned interior of the buffer of `value` (at least 4 MiB) is advised."""
    start = address(value)
    end = start + int(np.prod(value.shape)) * value.dtype.size
    begin, stop = -(-start // (2 * MIB)) * 2 * MIB, end // (2 * MIB) * 2 * MIB
    assert stop - begin >= 2 * MIB, "a buffer too small to check"
    covered = sum(max(0, min(e, stop) - max(b, begin)) for b, e in advised_ranges())
    return covered == stop - begin


def rows_of(dtype: tf.DType) -> int:
    """Rows that make a table of `dtype` as large as ROWS of float32."""
    return ROWS * 4 // dtype.size


def test_a_new_table_is_advised_and_a_small_one_is_not():
    table = sok.Variable(shape=[ROWS, DIM], initializer="random_normal")
    assert is_advised(table)
    middle = advised_bytes()
    small = sok.Variable(shape=[1000, DIM], initializer="random_normal")
    assert advised_bytes() == middle
    del table, small


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_a_table_from_an_initial_value_is_advised_with_its_values(dtype):
    value = np.random.default_rng(3).standard_normal([rows_of(dtype), DIM]).astype(np.float32)
    table = sok.Variable(value, dtype=dtype)
    assert is_advised(table)
    np.testing.assert_array_equal(table.numpy(), tf.cast(value, dtype).numpy())


def test_slots_are_advised_and_hold_their_fill():
    table = sok.Variable(shape=[ROWS, DIM], initializer="zeros")
    m, acc = get_slots(keras.optimizers.Adagrad(), table, [("m", 0.0), ("acc", 0.1)])
    assert is_advised(m) and is_advised(acc)
    np.testing.assert_array_equal(m.numpy(), np.zeros([ROWS, DIM], np.float32))
    np.testing.assert_array_equal(acc.numpy(), np.full([ROWS, DIM], 0.1, np.float32))


def test_float64_slots_keep_a_fill_float32_cannot_hold():
    table = sok.Variable(shape=[ROWS // 2, DIM], initializer="zeros", dtype=tf.float64)
    (acc,) = get_slots(keras.optimizers.Adagrad(), table, [("acc", 0.1)])
    np.testing.assert_array_equal(acc.numpy(), np.full([ROWS // 2, DIM], 0.1))


def test_assign_and_restore_keep_advice_and_values_and_spare_readers(tmp_path):
    table = sok.Variable(shape=[ROWS, DIM], initializer="random_normal")
    saved = table.numpy()
    path = tf.train.Checkpoint(t=table).save(str(tmp_path / "ckpt"))
    reader = tf.identity(table)  # shares the table's buffer
    assert address(reader) == address(table)
    out = table.assign(tf.zeros_like(table))
    assert address(table) != address(reader)  # the reader keeps the old buffer
    assert is_advised(table)
    assert float(tf.reduce_max(tf.abs(out))) == 0.0
    np.testing.assert_array_equal(reader.numpy(), saved)
    del reader, out
    tf.train.Checkpoint(t=table).restore(path).assert_consumed()
    np.testing.assert_array_equal(table.numpy(), saved)
    assert is_advised(table)
    assert table.assign(saved, read_value=False) is None


# One row-wise update of a fresh zeros table [rows, dim] (with a reader sharing its buffer if
# `shared`), in a new process: prints how many bytes the update advised. After the update the
# table is read in copy-on-read mode (each read a copy), so its buffer cannot be looked at
# directly, and in this process freed buffers' advised mappings may be reused.
UPDATE_SCRIPT = """
import sys; sys.path.insert(0, sys.argv[1])
from test_table_huge_pages import advised_bytes
import keras, tensorflow as tf, sok_lite as sok
rows, dim, shared = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
table = sok.Variable(shape=[rows, dim], initializer="zeros")
reader = tf.identity(table) if shared else None
optimizer = keras.optimizers.SGD(1.0)
ids = tf.ragged.constant([[rows - 1]], dtype=tf.int64)
before = advised_bytes()
with sok.OptimizerScope([table]):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(sok.lookup_sparse([table], [ids], combiners=["sum"])[0])
    optimizer.apply_gradients(zip(tape.gradient(loss, [table]), [table]))
print(advised_bytes() - before)
"""


def advised_by_an_update(rows: int, dim: int, shared: bool) -> int:
    args = [str(pathlib.Path(__file__).parent), str(rows), str(dim), str(int(shared))]
    out = subprocess.run(
        [sys.executable, "-c", UPDATE_SCRIPT, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return int(out.stdout.split()[-1])


def test_an_update_of_a_shared_buffer_copies_it_into_an_advised_one():
    table = sok.Variable(shape=[ROWS, DIM], initializer="zeros")
    reader = tf.identity(table)  # the update must not write the reader's buffer
    optimizer = keras.optimizers.SGD(1.0)
    ids = tf.ragged.constant([[3, 9]], dtype=tf.int64)
    with sok.OptimizerScope([table]):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(sok.lookup_sparse([table], [ids], combiners=["sum"])[0])
        optimizer.apply_gradients(zip(tape.gradient(loss, [table]), [table]))
    assert float(tf.reduce_max(tf.abs(reader))) == 0.0
    np.testing.assert_array_equal(table.numpy()[[3, 9]], -np.ones([2, DIM], np.float32))
    table_bytes = ROWS * DIM * 4  # the copy's 2 MiB-aligned interior is advised
    assert table_bytes - 4 * MIB <= advised_by_an_update(ROWS, DIM, shared=True) <= table_bytes


def test_the_wrong_shape_is_refused_as_before():
    table = sok.Variable(shape=[ROWS, DIM], initializer="zeros")
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError)):
        table.assign(np.zeros([ROWS + 1, DIM], np.float32))
    np.testing.assert_array_equal(table.numpy()[:2], np.zeros([2, DIM], np.float32))


def test_advice_is_off_with_the_setting_zero():
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from test_table_huge_pages import advised_bytes;"
        "import sok_lite as sok; b = advised_bytes();"
        "t = sok.Variable(shape=[160000, 64]); t.assign(t + 1.0);"
        "print(advised_bytes() - b)"
    )
    env = {**os.environ, "SOK_LITE_HUGE_PAGES": "0"}
    out = subprocess.run(
        [sys.executable, "-c", script, str(pathlib.Path(__file__).parent)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert out.stdout.split()[-1] == "0"


def test_the_rows_changed_tracker_of_a_long_table_is_advised():
    rows = 5_000_000  # int64 per row: 40 MB, a float32 table of width 1: 20 MB (not advised)
    table = sok.Variable(shape=[rows, 1], initializer="zeros")
    optimizer = keras.optimizers.SGD(1.0)
    ids = tf.ragged.constant([[rows - 1]], dtype=tf.int64)
    with sok.OptimizerScope([table]):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(sok.lookup_sparse([table], [ids], combiners=["sum"])[0])
        optimizer.apply_gradients(zip(tape.gradient(loss, [table]), [table]))
    assert updated_since(optimizer, table, -1).numpy().tolist() == [rows - 1]
    assert rows * 8 - 4 * MIB <= advised_by_an_update(rows, 1, shared=False) <= rows * 8


def test_bfloat16_slots_are_advised_and_hold_their_fill():
    rows = rows_of(tf.bfloat16)
    table = sok.Variable(shape=[rows, DIM], dtype=tf.bfloat16, slot_dtype=tf.bfloat16)
    (acc,) = get_slots(keras.optimizers.Adagrad(), table, [("acc", 0.1)])
    assert acc.dtype == tf.bfloat16
    assert is_advised(acc)
    expected = tf.fill([rows, DIM], tf.constant(0.1, tf.bfloat16)).numpy()
    np.testing.assert_array_equal(acc.numpy(), expected)
