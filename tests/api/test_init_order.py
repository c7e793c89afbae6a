"""sok.init and the tables: a table created first initializes with "auto"; init() again with
the backend already chosen changes nothing; another backend while tables made under the current
one are alive is a ValueError naming them (docs/user_guide.md, "Choosing the processes")."""

import gc
import weakref

import numpy as np
import pytest

import sok_lite as sok
from sok_lite import comm
from sok_lite.comm.local import LocalCommunicator


class FakeHorovod(LocalCommunicator):
    """Stands for the Horovod communicator (hvd.init() must not run in the test process)."""


@pytest.fixture(autouse=True)
def not_initialized(monkeypatch):
    """A process in which init() has not run yet; the previous state comes back afterwards."""
    monkeypatch.setattr(comm, "_current", None)
    monkeypatch.setattr(comm, "_chosen", None, raising=False)
    monkeypatch.setattr(comm, "_tables", weakref.WeakValueDictionary(), raising=False)
    monkeypatch.setattr("sok_lite.comm.horovod.HorovodCommunicator", FakeHorovod)


def test_a_table_created_before_init_initializes_with_auto():
    table = sok.Variable(np.ones([3, 2]), name="early")
    chosen = comm.current()
    assert type(chosen) is LocalCommunicator  # "auto" without Horovod or a strategy
    assert sok.init() is chosen  # the same choice again: nothing changes
    assert sok.init("local") is chosen
    assert table.numpy().shape == (3, 2)


def test_init_twice_with_the_same_backend_is_a_no_op():
    first = sok.init("horovod")
    table = sok.DynamicVariable(2, name="hashed")
    assert sok.init("hvd") is first
    assert sok.init(comm_tool="horovod") is first
    assert sok.set_comm_tool("horovod") is None and comm.current() is first
    assert table.dimension == 2


def test_another_backend_after_tables_exist_names_them():
    sok.init("local")
    fixed = sok.Variable(np.zeros([4, 2]), name="users")
    hashed = sok.DynamicVariable(2, name="items")
    with pytest.raises(ValueError) as error:
        sok.init("horovod")
    message = str(error.value)
    assert "init('horovod')" in message and "'local' communicator (1 rank(s))" in message
    assert "2 table(s)" in message and "'users:0'" in message and "'items" in message
    assert "sok.init() before creating any table" in message
    assert type(comm.current()) is LocalCommunicator  # unchanged: the tables still work
    with pytest.raises(ValueError, match="'users:0'"):
        sok.set_comm_tool("hvd")
    del fixed, hashed


def test_auto_after_hvd_init_is_refused_when_tables_exist(monkeypatch):
    """The usual mistake: tables made first (local), then hvd.init(), then sok.init()."""
    table = sok.Variable(np.zeros([4, 2]), name="made_first")
    monkeypatch.setattr("sok_lite.comm.horovod.horovod_is_initialized", lambda: True)
    with pytest.raises(ValueError, match="'made_first:0'"):
        sok.init()
    assert table.global_shape[0] == 4


def test_another_backend_once_the_tables_are_gone():
    sok.init("local")
    table = sok.Variable(np.zeros([4, 2]), name="dropped")
    del table
    gc.collect()
    assert isinstance(sok.init("horovod"), FakeHorovod)
    assert type(sok.init("local")) is LocalCommunicator  # no table made under Horovod


def test_a_table_whose_construction_failed_does_not_count():
    sok.init("local")
    with pytest.raises(ValueError, match="rank 3"):
        sok.Variable(np.zeros([4, 2]), mode="localized:3", name="bad")
    assert isinstance(sok.init("horovod"), FakeHorovod)


def test_many_tables_are_named_up_to_ten():
    sok.init("local")
    tables = [sok.Variable(np.zeros([1, 1]), name=f"t{i}") for i in range(12)]
    with pytest.raises(ValueError, match=r"12 table\(s\).*'t9:0' and 2 more"):
        sok.init("horovod")
    assert len(tables) == 12
