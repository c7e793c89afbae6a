"""The TableKind interface: both table classes implement it, and the row rule is one rule."""

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.tables import key_hash, table_kind
from sok_lite.tables.table_kind import TableKind


def _abstract_names() -> set[str]:
    return set(TableKind.__abstractmethods__)


@pytest.mark.parametrize("cls", [sok.Variable, sok.DynamicVariable])
def test_every_table_class_implements_the_interface(cls):
    assert issubclass(cls, TableKind)
    missing = {n for n in _abstract_names() if getattr(getattr(cls, n), "__isabstractmethod__", 0)}
    assert not missing


def test_a_kind_that_misses_a_method_cannot_be_built():
    class Partial(TableKind):
        pass

    with pytest.raises(TypeError, match="abstract"):
        Partial()


@pytest.mark.parametrize("num_ranks", [1, 2, 3, 5])
def test_row_owner_global_row_and_rows_held_agree(num_ranks):
    rows = 17
    ids = np.arange(rows)
    owner, local = table_kind._row_owner(ids, num_ranks)
    for rank in range(num_ranks):
        mine = ids[owner == rank]
        assert key_hash.rows_held(rows, rank, num_ranks) == len(mine)
        held = key_hash.global_row(np.arange(len(mine)), rank, num_ranks)
        np.testing.assert_array_equal(held, mine)
        np.testing.assert_array_equal(local[owner == rank], np.arange(len(mine)))


def test_what_each_kind_answers():
    static = sok.Variable(np.zeros([5, 2]), dtype=tf.float32)
    dynamic = sok.DynamicVariable(2, key_dtype=tf.int32)
    assert (static.kind, dynamic.kind) == ("static", "hash")
    assert (static.id_limit, dynamic.id_limit) == (5, -1)
    assert (static.owner_code, dynamic.owner_code) == (
        key_hash.OWNER_BY_ROW,
        key_hash.OWNER_BY_HASH,
    )
    assert dynamic.id_dtypes == (tf.int32,)
    assert dynamic.slot_variables(None, None) is None
    ids, values = static.export_rows()
    assert ids.numpy().tolist() == [0, 1, 2, 3, 4] and values.shape == (5, 2)
    localized = sok.Variable(np.zeros([3, 2]), mode="localized:0")
    assert localized.owner_code == 0
    np.testing.assert_array_equal(localized.owners(np.arange(3), 4), [0, 0, 0])
