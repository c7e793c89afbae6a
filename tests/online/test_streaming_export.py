"""export_saved_model streams the tables into the SavedModel a piece at a time: with pieces of 7
rows (tables span many pieces, the last one short) the model served in a process without
sok_lite gives every table's rows exactly (static float32 and bfloat16, localized, hash, hash
with a disk tier; plain and updatable), no piece holds more rows than the bound, and an export
that fails midway leaves nothing behind."""

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite.io import serving_stream
from tests.online.online_model import run_plain_tf

PIECE = 7
STATIC_ROWS, LOCAL_ROWS = 30, 11
STORED = list(range(-20, 25))  # hash keys given rows before the export
UNSEEN = [10**9 + 7, -(2**40), 12345]
NAMES = ["static", "local", "hash", "tiered"]
SPEC = [
    tf.TensorSpec([None], tf.int64, f"{name}_{part}")
    for name in NAMES
    for part in ("values", "splits")
]


class Tables:
    """A distributed and a localized static table, a hash table (all of `dtype`) and a
    float32 hash table with a disk tier, with rows stored in the hash tables."""

    def __init__(self, dtype, tier_dir):
        init = "random_uniform"
        self.tables = [
            sok.Variable(shape=[STATIC_ROWS, 4], initializer=init, dtype=dtype, name="static"),
            sok.Variable(
                shape=[LOCAL_ROWS, 2],
                initializer=init,
                dtype=dtype,
                mode="localized:0",
                name="local",
            ),
            sok.DynamicVariable(3, initializer="random_normal", dtype=dtype, name="hash"),
            sok.DynamicVariable(
                2,
                initializer="random_normal",
                name="tiered",
                storage=sok.storage.Disk(tier_dir, ram_budget="24KiB"),
            ),
        ]
        rng = np.random.default_rng(0)
        hash_table, tiered = self.tables[2:]
        hash_table.assign(tf.constant(STORED, tf.int64), rng.normal(size=[len(STORED), 3]))
        many = np.arange(-300, 300, dtype=np.int64)  # the tier spills most of them to disk
        tiered.assign(tf.constant(many), rng.normal(size=[len(many), 2]).astype(np.float32))
        assert tiered.memory_stats()["rows_disk"] > 0

    def predict(self, *args):
        ids = [tf.RaggedTensor.from_row_splits(v, s) for v, s in zip(args[::2], args[1::2])]
        return dict(zip(NAMES, sok.lookup_sparse(self.tables, ids, combiners="sum")))

    def export(self, path, updatable):
        extra = {"updatable": True, "model_id": "m"} if updatable else {}
        sok.export_saved_model(self.predict, path, SPEC, tables=self.tables, **extra)


def query(keys):
    """Inputs of one sample per id: each output row is one table row."""
    tables = [np.arange(STATIC_ROWS), np.arange(LOCAL_ROWS), np.asarray(keys), np.asarray(keys)]
    n = max(len(t) for t in tables)
    splits = np.arange(n + 1)
    inputs = {}
    for name, ids in zip(NAMES, tables):
        inputs[f"{name}_values"] = np.resize(ids, n).astype(np.int64).tolist()
        inputs[f"{name}_splits"] = splits.tolist()
    return inputs


SERVE = """
import json, sys
sys.modules["sok_lite"] = None  # the model must serve without sok_lite
import numpy as np, tensorflow as tf
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
args = {k: tf.constant(v, tf.int64) for k, v in json.loads(sys.stdin.read()).items()}
print(json.dumps({k: v.numpy().astype(np.float64).tolist() for k, v in serve(**args).items()}))
"""


def serve_without_sok_lite(path, inputs):
    return {k: np.array(v) for k, v in run_plain_tf(SERVE, [path], inputs).items()}


@pytest.fixture
def pieces(monkeypatch):
    """Pieces of PIECE rows; returns the (table, rows) of every piece gathered."""
    seen = []
    monkeypatch.setattr(serving_stream, "PIECE_ROWS", PIECE)
    monkeypatch.setattr(serving_stream, "piece_hook", lambda t, rows: seen.append((t, len(rows))))
    return seen


def predict_names(inputs):
    """query()'s inputs as predict's arguments."""
    parts = ("values", "splits")
    return [tf.constant(inputs[f"{n}_{part}"], tf.int64) for n in NAMES for part in parts]


def one_row_each(tables, *ids):
    """The rows of ids [n] of each table, side by side (a lookup per table)."""
    ragged = [tf.RaggedTensor.from_row_lengths(i, tf.ones_like(i)) for i in ids]
    return tf.concat(sok.lookup_sparse(list(tables), ragged, combiners="sum"), axis=1)


@pytest.mark.parametrize("updatable", [False, True], ids=["plain", "updatable"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_streamed_tables_serve_their_rows(tmp_path, pieces, dtype, updatable):
    model = Tables(dtype, tmp_path / "tier")
    path = tmp_path / "served"
    model.export(path, updatable)
    stored_keys = STORED + list(range(-300, -280))
    stored = serve_without_sok_lite(path, query(stored_keys))
    unseen = serve_without_sok_lite(path, query(UNSEEN))
    # The training tables (read after the export: the lookups of unseen keys create them).
    want_stored = model.predict(*predict_names(query(stored_keys)))
    for name in NAMES:
        np.testing.assert_array_equal(stored[name], want_stored[name].numpy(), err_msg=name)
    want_unseen = model.predict(*predict_names(query(UNSEEN)))
    for name in ("hash", "tiered"):
        np.testing.assert_allclose(unseen[name], want_unseen[name].numpy(), rtol=1e-6, atol=1e-7)
    # Every table went in several pieces of at most PIECE rows, the last one short.
    sizes = {}
    for table, rows in pieces:
        sizes.setdefault(table, []).append(rows)
    assert len(sizes) == 4
    assert all(max(s) <= PIECE for s in sizes.values()), sizes
    counts = sorted(sum(s) for s in sizes.values())
    assert counts == sorted([STATIC_ROWS, LOCAL_ROWS, len(STORED), 600])
    static = next(s for t, s in sizes.items() if "static" in t)
    assert static == [7, 7, 7, 7, 2]
    shapes = dict(tf.train.list_variables(str(path / "variables" / "variables")))
    assert [STATIC_ROWS, 4] in shapes.values()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".served")]


def test_no_piece_exceeds_the_bound(tmp_path, monkeypatch):
    """The memory bound, counted rather than timed: with pieces of 64 rows, a 5000-row table and
    a 3000-key hash table go through the export without any array of more than 64 rows."""
    seen = []
    monkeypatch.setattr(serving_stream, "PIECE_ROWS", 64)
    monkeypatch.setattr(serving_stream, "piece_hook", lambda t, rows: seen.append(rows.shape))
    big = sok.Variable(shape=[5000, 8], initializer="random_uniform", name="big")
    keyed = sok.DynamicVariable(8, name="keyed")
    keys = np.arange(3000, dtype=np.int64) * 7
    keyed.assign(tf.constant(keys), np.ones([3000, 8], np.float32))

    def predict(a, b):
        return one_row_each([big, keyed], a, b)

    spec = [tf.TensorSpec([None], tf.int64)] * 2
    sok.export_saved_model(predict, tmp_path / "m", spec, tables=[big, keyed])
    assert max(s[0] for s in seen) == 64
    assert sum(s[0] for s in seen) == 8000
    served = tf.saved_model.load(str(tmp_path / "m")).signatures["serving_default"]
    out = list(served(a=tf.constant([4999, 0], tf.int64), b=tf.constant(keys[-2:])).values())[0]
    np.testing.assert_array_equal(out[:, :8], tf.gather(big.numpy(), [4999, 0]).numpy())
    np.testing.assert_array_equal(out[:, 8:], np.ones([2, 8]))


class Broken(Exception):
    pass


@pytest.mark.parametrize("existing", [False, True], ids=["new_path", "existing_path"])
def test_a_failed_export_leaves_nothing(tmp_path, pieces, monkeypatch, existing):
    good = sok.Variable(shape=[30, 2], name="good")
    bad = sok.DynamicVariable(2, name="bad")
    bad.assign(tf.constant(np.arange(40), tf.int64), np.ones([40, 2], np.float32))
    chunks = type(bad).checkpoint_chunks

    def failing(self, *args):
        for n, piece in enumerate(chunks(self, *args)):
            if self is bad and n == 2:
                raise Broken("the disk went away")
            yield piece

    monkeypatch.setattr(type(bad), "checkpoint_chunks", failing)
    (tmp_path / "other.txt").write_text("mine")
    path = tmp_path / "nested" / "served"
    if existing:
        path.mkdir(parents=True)
        (path / "notes.txt").write_text("keep")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))

    def predict(a, b):
        return one_row_each([good, bad], a, b)

    spec = [tf.TensorSpec([None], tf.int64)] * 2
    with pytest.raises(Broken):
        sok.export_saved_model(predict, path, spec, tables=[good, bad])
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    assert (tmp_path / "other.txt").read_text() == "mine"
    if existing:
        assert (path / "notes.txt").read_text() == "keep"
    assert len(pieces) > 2  # it failed midway, after pieces were written


def test_an_export_into_an_existing_directory_replaces_the_model_only(
    tmp_path, pieces, monkeypatch
):
    table = sok.Variable(shape=[20, 2], initializer="random_uniform", name="again")
    path = tmp_path / "served"
    path.mkdir()
    (path / "notes.txt").write_text("keep")
    spec = [tf.TensorSpec([None], tf.int64)]

    def predict(ids):
        return one_row_each([table], ids)

    sok.export_saved_model(predict, path, spec, tables=[table])  # 3 pieces
    assert len(list((path / "variables").glob("variables.data-*"))) == 4  # and the dense rest
    table.assign(table.numpy() + 1.0)
    monkeypatch.setattr(serving_stream, "PIECE_ROWS", 20)
    sok.export_saved_model(predict, path, spec, tables=[table])  # over the first, in 1 piece
    assert (path / "notes.txt").read_text() == "keep"
    # The first export's shards, which the new index does not name, are left to the user.
    assert len(list((path / "variables").glob("variables.data-*"))) == 4 + 2
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    ids = tf.range(20, dtype=tf.int64)
    np.testing.assert_array_equal(list(serve(ids=ids).values())[0], table.numpy())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["served"]


def test_an_export_onto_a_file_is_refused(tmp_path):
    table = sok.Variable(shape=[4, 2], name="onto_a_file")
    path = tmp_path / "served"
    path.write_text("mine")

    def predict(ids):
        return one_row_each([table], ids)

    with pytest.raises(ValueError, match="not a directory"):
        sok.export_saved_model(predict, path, [tf.TensorSpec([None], tf.int64)], tables=[table])
    assert path.read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir()] == ["served"]
