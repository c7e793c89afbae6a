"""Every public stateful call of sok_lite, with the ways it can fail.

test_failed_calls.py runs each failure on each table kind it applies to and holds the state
after the failed call to the state before, bit for bit. test_every_public_call_is_classified
fails when a public name of sok_lite is neither here nor in STATELESS, so a new stateful call
cannot ship without failure cases.
"""

import dataclasses
import json
from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf

import sok_lite as sok
from tests.robustness.worlds import DIM, KEYED, KINDS, ROWS, World, ids, make_table

InvalidArgument = tf.errors.InvalidArgumentError
STATIC = ("static", "localized", "half_static")


def no_setup(world: World) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class Failure:
    """call(world, prepared) must raise `error` (matching `match`) and change nothing;
    prepared = setup(world), run before the state is taken (files it writes are the test's).
    alike_on_every_rank: every rank of a job meets the failure the same way before any
    exchange (the 2-rank run takes those without a setup)."""

    name: str
    call: Callable[[World, object], object]
    error: type | tuple = (ValueError, InvalidArgument)
    match: str | None = None
    kinds: tuple = KINDS
    setup: Callable[[World], object] = no_setup
    alike_on_every_rank: bool = True


def _apply(world: World, grad, wrapper: bool = False, dense: tuple = ()) -> None:
    pairs = [(grad, world.table), *dense]
    if wrapper:
        sok.OptimizerWrapper(world.optimizer).apply_gradients(pairs)
        return
    with sok.OptimizerScope([world.table]):
        world.optimizer.apply_gradients(pairs)


def _a_second_table(world: World):
    return make_table("static", world.root, name="second")


def _apply_beside_a_bad_table(world: World, second, wrapper: bool, traced: bool) -> None:
    """The world's table (a valid gradient) and a second table with a row past its end, in one
    call: the kernels check each table's rows, so the world's table must not be updated first
    (eagerly) or beside it (in a graph)."""
    past = tf.IndexedSlices(tf.ones([1, DIM]), tf.constant([ROWS + 3], tf.int64), [ROWS, DIM])
    grads = [(_slices(world, [1]), world.table), (past, second)]

    wrapped = sok.OptimizerWrapper(world.optimizer)  # made outside the traced function

    def apply():
        if wrapper:
            wrapped.apply_gradients(grads)
        else:
            with sok.OptimizerScope([world.table, second]):
                world.optimizer.apply_gradients(grads)

    (tf.function(apply) if traced else apply)()


def _built_on_a_dense_weight(world: World) -> None:
    world.optimizer.build([tf.Variable([1.0], name="known")])


def _apply_with_an_unknown_weight(world: World, wrapper: bool) -> None:
    """The table's gradient (valid) beside a weight the optimizer was not built with, which
    Keras refuses: the table must not be updated first."""
    unknown = (tf.ones([1]), tf.Variable([2.0], name="unknown"))
    _apply(world, _slices(world, [1]), wrapper, dense=(unknown,))


def _slices(world: World, indices, width=DIM) -> tf.IndexedSlices:
    values = tf.ones([len(indices), width])
    return tf.IndexedSlices(values, tf.constant(indices, tf.int64), tf.constant([ROWS, DIM]))


def _corrupt_copy(world: World, damage: Callable) -> str:
    """A copy of the world's checkpoint beside it, damaged."""
    copy = world.root / "damaged"
    copy.mkdir()
    for f in world.checkpoint.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    damage(copy)
    return copy


def _flip_byte(path) -> None:
    rows = path / "t0.r0.rows"
    data = bytearray(rows.read_bytes())
    data[len(data) // 2] ^= 0x10
    rows.write_bytes(bytes(data))


def _wrong_dim(path) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["tables"][0]["dim"] = DIM + 1
    (path / "manifest.json").write_text(json.dumps(manifest))


def _user_file(path):
    path.write_text("notes\n")
    return path


def _user_dir(world: World):
    target = world.root / "project"
    (target / "src").mkdir(parents=True)
    (target / "src" / "main.py").write_text("print('mine')\n")
    return target


def _pair_with_a_wider_partner(world: World):
    """A two-table dump whose second table is wider than the one given at load."""
    partner = make_table(world.kind, world.root, name="partner", dim=DIM + 1)
    sok.dump(world.root / "pair", [world.table, partner], world.optimizer)
    return make_table(world.kind, world.root, name="other")


def _two_tables_one_unlisted(world: World):
    other = make_table("static", world.root, name="unlisted")

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.int64)])
    def serve(x):
        return sok.lookup_sparse([world.table, other], [x, x])

    return serve


def _wider_tf_checkpoint(world: World) -> str:
    other = make_table(world.kind, world.root, name="wide", dim=DIM + 1)
    return tf.train.Checkpoint(table=other).write(str(world.root / "tf_other" / "ck"))


def _refused_before_any_update(wrapper: bool) -> list[Failure]:
    """apply_gradients' failures that only a check before every update of the call can keep
    from changing anything (the route: OptimizerScope, or OptimizerWrapper when `wrapper`)."""
    return [
        Failure(
            "a weight the optimizer was not built with",
            lambda w, p: _apply_with_an_unknown_weight(w, wrapper),
            match="built without variable 'unknown",
            setup=_built_on_a_dense_weight,
        ),
        Failure(
            "a row past a second table of the call",
            lambda w, second: _apply_beside_a_bad_table(w, second, wrapper, traced=False),
            match="variable 'second': gradient row 43 is out of range",
            setup=_a_second_table,
        ),
        Failure(
            "a row past a second table of a traced call",
            lambda w, second: _apply_beside_a_bad_table(w, second, wrapper, traced=True),
            match=r"second\W*: gradient rows must lie in \[0, 40\)",
            setup=_a_second_table,
        ),
    ]


FAILURES: dict[str, list[Failure]] = {
    "lookup_sparse": [
        Failure(
            "negative id",
            lambda w, p: sok.lookup_sparse(w.table, ids([[1, -1]])),
            kinds=STATIC,
            alike_on_every_rank=False,
        ),
        Failure(
            "id past the table",
            lambda w, p: sok.lookup_sparse(w.table, ids([[ROWS]])),
            kinds=STATIC,
            alike_on_every_rank=False,
        ),
        Failure(
            "float ids",
            lambda w, p: sok.lookup_sparse(w.table, tf.ragged.constant([[1.0]])),
        ),
        Failure(
            "unknown combiner",
            lambda w, p: sok.lookup_sparse(w.table, ids([[1]]), combiners=["max"]),
        ),
        Failure(
            "mismatched lists",
            lambda w, p: sok.lookup_sparse([w.table], [ids([[1]]), ids([[2]])]),
        ),
        Failure(
            "row longer than hotness",
            lambda w, p: sok.lookup_sparse(w.table, ids([[1, 2, 3]]), hotness=[2]),
            alike_on_every_rank=False,
        ),
        Failure(
            "weights of another layout",
            lambda w, p: sok.lookup_sparse(
                w.table, ids([[1, 2]]), sp_weights=tf.ragged.constant([[1.0]])
            ),
            alike_on_every_rank=False,
        ),
        Failure(
            "a batch larger than the RAM budget",
            lambda w, p: sok.lookup_sparse(w.table, ids([list(range(10**6, 10**6 + 5000))])),
            match="ram_budget",
            kinds=("tiered",),
            alike_on_every_rank=False,
        ),
    ],
    "OptimizerScope.apply_gradients": [
        Failure("gradient of another width", lambda w, p: _apply(w, _slices(w, [1], DIM + 1))),
        Failure(
            "dense gradient for a hash table",
            lambda w, p: _apply(w, tf.ones([3, DIM])),
            kinds=KEYED,
        ),
        Failure(
            "gradient row past the table",
            lambda w, p: _apply(w, _slices(w, [ROWS + 3])),
            kinds=STATIC,
            alike_on_every_rank=False,
        ),
        *_refused_before_any_update(wrapper=False),
    ],
    "OptimizerWrapper.apply_gradients": [
        Failure(
            "gradient of another width", lambda w, p: _apply(w, _slices(w, [1], DIM + 1), True)
        ),
        Failure(
            "dense gradient for a hash table",
            lambda w, p: _apply(w, tf.ones([3, DIM]), True),
            kinds=KEYED,
        ),
        *_refused_before_any_update(wrapper=True),
    ],
    "Variable.assign": [
        Failure(
            "value of another shape",
            lambda w, p: w.table.assign(np.zeros([ROWS + 1, DIM])),
            kinds=STATIC,
        ),
        Failure(
            "values of another width",
            lambda w, p: w.table.assign(tf.constant([1, 2], tf.int64), np.zeros([2, DIM + 1])),
            kinds=KEYED,
        ),
        Failure(
            "more new keys than the RAM budget indexes",
            lambda w, p: w.table.assign(
                np.arange(40_000, dtype=np.int64), np.zeros([40_000, DIM], np.float32)
            ),
            match="ram_budget",
            kinds=("tiered",),
            alike_on_every_rank=False,
        ),
        Failure(
            "float keys",
            lambda w, p: w.table.assign(tf.constant([1.0]), np.zeros([1, DIM])),
            kinds=KEYED,
        ),
    ],
    "DynamicVariable.replace_rows": [
        Failure(
            "rows not a multiple of the dimension",
            lambda w, p: w.table.replace_rows(np.array([1], np.int64), np.zeros([1, DIM + 1])),
            kinds=KEYED,
        ),
        Failure(
            "fewer rows than keys",
            lambda w, p: w.table.replace_rows(np.array([1, 2], np.int64), np.zeros([1, DIM])),
            kinds=KEYED,
        ),
        Failure(
            "more rows than the RAM budget holds",
            lambda w, p: w.table.replace_rows(
                np.arange(40_000, dtype=np.int64), np.zeros([40_000, DIM], np.float32)
            ),
            match="ram_budget",
            kinds=("tiered",),
            alike_on_every_rank=False,
        ),
    ],
    "DynamicVariable.evict": [
        Failure("negative steps", lambda w, p: w.table.evict(-1), kinds=KEYED),
    ],
    "load": [
        Failure(
            "missing checkpoint", lambda w, p: sok.load(w.root / "none", [w.table], w.optimizer)
        ),
        Failure(
            "corrupt rows file",
            lambda w, p: sok.load(p, [w.table], w.optimizer),
            match="checksum",
            setup=lambda w: _corrupt_copy(w, _flip_byte),
        ),
        Failure(
            "another dimension",
            lambda w, p: sok.load(p, [w.table], w.optimizer),
            match="dim",
            setup=lambda w: _corrupt_copy(w, _wrong_dim),
        ),
        Failure(
            "another optimizer's slots",
            lambda w, p: sok.load(w.checkpoint, [w.table], keras.optimizers.Adagrad()),
            match="slots",
        ),
        Failure(
            "a later table does not match",
            lambda w, p: sok.load(w.root / "pair", [w.table, p], w.optimizer),
            setup=_pair_with_a_wider_partner,
        ),
    ],
    "dump": [
        Failure(
            "onto a user's directory",
            lambda w, p: sok.dump(p, [w.table]),
            match="refusing",
            setup=_user_dir,
        ),
        Failure(
            "onto a user's file",
            lambda w, p: sok.dump(p, [w.table]),
            match="refusing",
            setup=lambda w: _user_file(w.root / "notes.txt"),
        ),
        Failure(
            "increment without the optimizer",
            lambda w, p: sok.dump(w.root / "inc", [w.table], since_step=1),
        ),
        Failure(
            "a plain tf.Variable",
            lambda w, p: sok.dump(w.root / "x", [tf.Variable(1.0)]),
            TypeError,
        ),
    ],
    "export_saved_model": [
        Failure(
            "a table missing from tables=",
            lambda w, p: sok.export_saved_model(
                p, w.root / "served", [tf.TensorSpec([None, 2], tf.int64)], tables=[w.table]
            ),
            match="unlisted",
            setup=_two_tables_one_unlisted,
        ),
    ],
    "DeltaWriter": [
        Failure(
            "an empty model_id",
            lambda w, p: sok.DeltaWriter(w.root / "deltas", [w.table], w.optimizer, ""),
            match="model_id",
        ),
        Failure(
            "a delta of that sequence already written",
            lambda w, p: sok.DeltaWriter(w.root / "deltas", [w.table], w.optimizer, "m").write(),
            match="exists",
            setup=lambda w: sok.DeltaWriter(w.root / "deltas", [w.table], w.optimizer, "m").write(),
        ),
    ],
    "prefetch": [
        Failure(
            "more id lists than tables",
            lambda w, p: sok.prefetch([w.table], [ids([[1]]), ids([[2]])]),
            ValueError,
            match="1 tables and 2 id lists",
        ),
        Failure(
            "float ids",
            lambda w, p: sok.prefetch(w.table, tf.constant([1.5])),
            ValueError,
            match="integer ids",
        ),
    ],
    "tf.train.Checkpoint.restore": [
        Failure(
            "a table of another dimension",
            lambda w, p: tf.train.Checkpoint(table=w.table).read(p).assert_consumed(),
            Exception,
            setup=_wider_tf_checkpoint,
        ),
    ],
    "keras.Model.load_weights": [],  # cases in test_failed_keras_calls.py (a model's world)
    "keras.saving.load_model": [],  # idem
}

# Public names that change no state of a table, an optimizer or a file the user owns (or that
# only create new objects), with why.
STATELESS = {
    "init": "chooses the communicator (test_init_order.py holds its refusals)",
    "rank": "reads",
    "num_ranks": "reads",
    "Variable": "creates a table",
    "DynamicVariable": "creates a table",
    "filter_variables": "reads",
    "split_embedding_variable_from_others": "reads",
    "opt_slots": "reads",
    "CheckpointError": "an exception type",
    "memory_report": "reads",
    "plan_memory": "computes",
    "MemoryReport": "a result type",
    "MemoryPlan": "a result type",
    "TableSpec": "a value type",
    "OptimizerScope": "a context: its apply_gradients is registered",
    "OptimizerWrapper": "a factory: its apply_gradients is registered",
    "optimizers": "optimizer factories (their apply_gradients: OptimizerWrapper)",
    "keras": "layers: their weights load through keras.Model.load_weights",
    "storage": "a configuration type",
    "Init": "SOK 1.x alias of init",
    "All2AllDenseEmbedding": "SOK 1.x layer over lookup_sparse",
    "DistributedEmbedding": "SOK 1.x layer over lookup_sparse",
    "tf_version": "reads",
    "raw_ops": "SOK's op namespace over lookup_sparse",
    "communication": "SOK's communicator namespace",
    "set_comm_tool": "SOK alias of init",
    "DistributedVariable": "creates a table",
    "LocalizedVariable": "creates a table",
    "all2all_dense_embedding": "SOK alias over lookup_sparse",
    "SGD": "an optimizer factory",
    "export": "reads rows",
    "__version__": "a string",
}

# SOK-named calls that are registered calls under another name.
ALIASES = {
    "assign": "Variable.assign",
    "incremental_model_dump": "dump",
    "sparse_read_and_evict": "DynamicVariable.evict",
}


def failures_on_every_rank() -> list[tuple[str, Failure]]:
    """(call, failure) of the failures that every rank of a job meets alike before any
    exchange and that need no setup (a setup writes files: a job would need one rank to do
    it), as the 2-rank failed-calls worker runs them."""
    return [
        (call, f)
        for call, fs in FAILURES.items()
        for f in fs
        if f.alike_on_every_rank and f.setup is no_setup
    ]
