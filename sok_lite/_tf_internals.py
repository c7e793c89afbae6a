"""The TensorFlow and Keras internals sok_lite relies on: which feature needs which private name,
checked when sok_lite is imported, and the TensorFlow ones themselves.

Every private TensorFlow, Keras or tf_keras name sok_lite uses is listed in NAMES, and every
feature that needs one in FEATURES (docs/install.md, "Version checks", lists them from here).
Each name is probed once, cheaply (a lookup, or a look at the attributes a function's code
reads), when sok_lite is imported; tf_keras names when tf_keras is imported or first needed. A
name that has moved does not stop the import: the features that need it raise
MissingInternalError when used, naming the name, the running versions and the supported range,
and the others keep working. sok_lite/_keras_internals.py holds the Keras ones.
"""

import dataclasses
import importlib
import sys
from typing import Any

import tensorflow as tf

from sok_lite._tf_range import KERAS_MIN, TF_MAX, TF_MIN


@dataclasses.dataclass(frozen=True)
class PrivateName:
    """A private name, a dotted path from a module that must exist. With `read_by`, the name is
    an instance attribute, which no class lookup can see: the code of the method `read_by` of
    the same class (a property's getter) must still read or set it."""

    name: str
    read_by: str = ""

    @property
    def owner(self) -> str:
        return self.name.split(".")[0]

    @property
    def resolve(self) -> str:
        """What must exist: the name, or the method that reads it."""
        if not self.read_by:
            return self.name
        return f"{self.name.rsplit('.', 1)[0]}.{self.read_by}"


_RV = "tensorflow.python.ops.resource_variable_ops"
_BASE = "tensorflow.python.trackable.base"
_LEGACY = "tf_keras.src.optimizers.legacy.optimizer_v2"
_LSO = "keras.optimizers.LossScaleOptimizer"
_SUMMARY_UTILS = "keras.src.utils.summary_utils"
_OBJECT_GRAPH = "tensorflow.core.protobuf.trackable_object_graph_pb2"
_HANDLE_DATA = "tensorflow.python.ops.handle_data_util.get_resource_handle_data"
NAMES: dict[str, PrivateName] = {
    n.name: n
    for n in (
        PrivateName(f"{_RV}.ResourceVariable"),
        PrivateName(f"{_RV}.BaseResourceVariable"),
        PrivateName(f"{_RV}.variable_accessed"),
        PrivateName(f"{_RV}.BaseResourceVariable._trainable", "trainable"),
        PrivateName(f"{_RV}.BaseResourceVariable._dense_var_to_tensor"),
        PrivateName(f"{_BASE}.VARIABLE_VALUE_KEY"),
        PrivateName(f"{_BASE}.Trackable"),
        PrivateName(f"{_BASE}.Trackable._serialize_to_tensors"),
        PrivateName(f"{_BASE}.Trackable._restore_from_tensors"),
        PrivateName("tensorflow.python.debug.lib.check_numerics_callback._state"),
        PrivateName("tensorflow.python.framework.op_def_registry.get"),
        PrivateName(_HANDLE_DATA),
        PrivateName("keras.src.utils.tracking.Tracker.add_to_store"),
        PrivateName("keras.layers.Layer._tracker", "_track_variable"),
        PrivateName("keras.src.backend.common.symbolic_scope.in_symbolic_scope"),
        PrivateName("keras.optimizers.Optimizer._trainable_variables", "apply"),
        PrivateName("keras.optimizers.Optimizer._get_variable_index"),
        PrivateName(f"{_LSO}.check_finite"),
        PrivateName(f"{_LSO}.scale_loss"),
        PrivateName(f"{_LSO}.build"),
        PrivateName(f"{_SUMMARY_UTILS}.count_params"),
        PrivateName(f"{_SUMMARY_UTILS}.weight_memory_size"),
        PrivateName(f"{_LEGACY}._var_key"),
        PrivateName(f"{_LEGACY}.OptimizerV2._get_hyper"),
        PrivateName(f"{_LEGACY}.OptimizerV2._decayed_lr"),
        PrivateName(f"{_LEGACY}.OptimizerV2._iterations", "iterations"),
        PrivateName("tf_keras.src.optimizers.optimizer.Optimizer._iterations", "iterations"),
        PrivateName("sys._getframe"),
        PrivateName(f"{_OBJECT_GRAPH}.TrackableObjectGraph"),
    )
}

_VARIABLES = f"{_RV}.ResourceVariable", f"{_RV}.BaseResourceVariable"
_CHECKPOINTS = tuple(n for n in NAMES if n.startswith("tensorflow.python.trackable"))
_SUMMARY = tuple(n for n in NAMES if ".summary_utils." in n)

# Feature -> the private names it needs. The features are what users see; the error names one.
FEATURES: dict[str, tuple[str, ...]] = {
    "tables (sok.Variable, sok.DynamicVariable)": (
        *_VARIABLES,
        f"{_RV}.BaseResourceVariable._dense_var_to_tensor",
    ),
    "gradients of lookups": (f"{_RV}.variable_accessed",),
    "checkpoints of hash tables and bfloat16 optimizer slots": _CHECKPOINTS,
    "optimizer steps under tf.debugging.enable_check_numerics": (
        "tensorflow.python.debug.lib.check_numerics_callback._state",
    ),
    "op argument checks": ("tensorflow.python.framework.op_def_registry.get",),
    "traced optimizer steps without row checks on one-id lookups' gradients": (_HANDLE_DATA,),
    "sok_lite.keras layers holding tables": (
        "keras.src.utils.tracking.Tracker.add_to_store",
        "keras.layers.Layer._tracker",
    ),
    "freezing tables (trainable=False)": (f"{_RV}.BaseResourceVariable._trainable",),
    "sok_lite.keras layers in fit under a tf.distribute strategy": (
        "keras.src.backend.common.symbolic_scope.in_symbolic_scope",
    ),
    "Keras optimizers applying tables": (
        "keras.optimizers.Optimizer._trainable_variables",
        "keras.optimizers.Optimizer._get_variable_index",
    ),
    "mixed-precision loss scaling (keras.optimizers.LossScaleOptimizer)": (
        "keras.optimizers.LossScaleOptimizer.check_finite",
        "keras.optimizers.LossScaleOptimizer.scale_loss",
        "keras.optimizers.LossScaleOptimizer.build",
        "sys._getframe",
    ),
    "hash tables in sok_lite.keras layers (weight counts of model.summary())": _SUMMARY,
    "tf_keras optimizers": tuple(n for n in NAMES if n.startswith("tf_keras.")),
    "export_saved_model (the tables' checkpoint entries)": (
        f"{_OBJECT_GRAPH}.TrackableObjectGraph",
    ),
}


class MissingInternalError(RuntimeError):
    """A sok_lite feature needs a private TensorFlow or Keras name that the running version does
    not have: that feature cannot be used with it (the others can)."""


def _resolve(path: str) -> Any:
    """The object at dotted `path`: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            found = getattr(found, attr)
        return found
    raise ImportError(f"no module {parts[0]}")


def _probe(private: PrivateName) -> str | None:
    """None when `private` is where sok_lite looks for it, else what is wrong."""
    try:
        found = _resolve(private.resolve)
    except (ImportError, AttributeError) as e:
        return f"{type(e).__name__}: {e}"
    if private.read_by:
        code = getattr(getattr(found, "fget", found), "__code__", None)
        attribute = private.name.rsplit(".", 1)[1]
        if code is None or attribute not in code.co_names:
            return f"{private.resolve} no longer uses {attribute}"
    return None


# Name -> what is wrong, for the names probed so far that are missing.
_missing: dict[str, str] = {}
_probed: set[str] = set()


def probe(names: tuple[str, ...] | None = None) -> dict[str, str]:
    """Probes `names` (default: those whose owner module is imported) not probed yet; returns
    every missing name found so far, with what is wrong."""
    for name in NAMES if names is None else names:
        private = NAMES[name]
        if name in _probed or (names is None and private.owner not in sys.modules):
            continue
        _probed.add(name)
        problem = _probe(private)
        if problem is not None:
            _missing[name] = problem
    return dict(_missing)


def _versions() -> str:
    running = [f"TensorFlow {tf.__version__}"]
    for module in ("keras", "tf_keras"):
        if module in sys.modules:
            running.append(f"{module} {getattr(sys.modules[module], '__version__', '?')}")
    return ", ".join(running)


def require(feature: str) -> None:
    """Raises MissingInternalError when a private name that `feature` needs has moved."""
    names = FEATURES[feature]
    if not _missing and _probed.issuperset(names):
        return
    missing = {name: problem for name, problem in probe(names).items() if name in names}
    if not missing:
        return
    listed = "; ".join(f"{name} ({problem})" for name, problem in missing.items())
    raise MissingInternalError(
        f"sok_lite: {feature} cannot be used with {_versions()}: it needs {listed}, private "
        f"to {'/'.join(sorted({NAMES[n].owner for n in missing}))}, which has moved. sok_lite "
        f"supports TensorFlow >={TF_MIN[0]}.{TF_MIN[1]},<{TF_MAX[0]}.{TF_MAX[1]} with Keras "
        f'>={KERAS_MIN[0]}.{KERAS_MIN[1]} up to the newest tested (docs/install.md, "Version '
        'checks"); the rest of sok_lite still works.'
    )


def _class(path: str, feature: str) -> Any:
    """The class at `path` or, if a name that `feature` needs has moved, a stand-in that refuses
    to make an instance (a subclass can still be defined: sok_lite imports, and only the feature
    fails)."""
    if not set(probe(FEATURES[feature])) & set(FEATURES[feature]):
        return _resolve(path)

    class Missing:
        def __new__(cls, *args: object, **kwargs: object) -> "Missing":
            require(feature)
            return super().__new__(cls)

    Missing.__name__ = path.rsplit(".", 1)[1]
    return Missing


def _value(path: str, default: Any) -> Any:
    return default if path in probe((path,)) else _resolve(path)


probe()  # TensorFlow's and (when imported) Keras' and tf_keras' names, once, at import
_TABLES = "tables (sok.Variable, sok.DynamicVariable)"
_CHECKPOINTS_FEATURE = "checkpoints of hash tables and bfloat16 optimizer slots"

# The resource-variable class that tf.Variable builds in TF2; sok_lite.Variable extends it.
ResourceVariable = _class(f"{_RV}.ResourceVariable", _TABLES)
# A variable over an existing resource handle; sok_lite.DynamicVariable wraps its hash table so
# that tapes, Keras and tf.train.Checkpoint treat it as a variable.
BaseResourceVariable = _class(f"{_RV}.BaseResourceVariable", _TABLES)
# The checkpoint key of a variable's value; a bfloat16 optimizer slot saves its float32 view
# under it (sok_lite/optim/slots.py), so that float32 and bfloat16 slots load into each other.
VARIABLE_VALUE_KEY = _value("tensorflow.python.trackable.base.VARIABLE_VALUE_KEY", "VARIABLE_VALUE")
# The checkpointable base with no automatic attribute tracking (that view's base class).
Trackable = _class("tensorflow.python.trackable.base.Trackable", _CHECKPOINTS_FEATURE)


_variable_accessed = _value(f"{_RV}.variable_accessed", None)
_check_numerics_state = _value("tensorflow.python.debug.lib.check_numerics_callback._state", None)
_op_def_get = _value("tensorflow.python.framework.op_def_registry.get", None)
_resource_handle_data = _value(_HANDLE_DATA, None)


def variable_accessed(variable: Any) -> None:
    """Tells active GradientTapes (and the FuncGraph) that an op reads `variable`.

    Our ops take the variable's resource handle, which TF's own read path would otherwise
    record; without this, tape.gradient(loss, variable) returns None.
    """
    require("gradients of lookups")
    _variable_accessed(variable)


def check_numerics_enabled() -> bool:
    """Whether tf.debugging.enable_check_numerics() is on in this thread (TF keeps it per
    thread, in the state that disable_check_numerics() clears)."""
    require("optimizer steps under tf.debugging.enable_check_numerics")
    return hasattr(_check_numerics_state, "check_numerics_callback")


def trackable_object_graph(serialized: bytes) -> Any:
    """The TrackableObjectGraph proto of a checkpoint's object graph entry: which checkpoint
    keys hold which saved object's values."""
    require("export_saved_model (the tables' checkpoint entries)")
    graph = _resolve(f"{_OBJECT_GRAPH}.TrackableObjectGraph")()
    graph.ParseFromString(serialized)
    return graph


def op_def(op_type: str) -> Any:
    """The registered OpDef of an op type (its inputs' names and list lengths), or None."""
    require("op argument checks")
    return _op_def_get(op_type)


def static_rows(handle: tf.Tensor) -> int:
    """The rows of the variable behind a graph tensor's resource handle, as the shape its handle
    data records; -1 where that is unknown (no shape, an eager handle, or the name has moved:
    the feature then falls back to checking the rows, as before)."""
    if _HANDLE_DATA in probe((_HANDLE_DATA,)) or not tf.is_symbolic_tensor(handle):
        return -1  # (the name takes graph tensors only)
    try:
        shapes = _resource_handle_data(handle).shape_and_type
    except (AttributeError, TypeError, ValueError):
        return -1
    if len(shapes) != 1 or shapes[0].shape.unknown_rank or not shapes[0].shape.dim:
        return -1
    return int(shapes[0].shape.dim[0].size)  # -1: unknown
