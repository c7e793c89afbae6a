"""The TensorFlow versions sok_lite supports: the one place that states them.

setup.py, the Makefile and scripts/test_matrix.py run this file on its own (runpy): keep it free
of imports.
"""

TF_MIN = (2, 16)  # inclusive: the first TensorFlow with Keras 3 as its Keras
TF_MAX = (2, 22)  # exclusive
TF_DEFAULT = (2, 21)  # the development and CI environment's TensorFlow (make setup)
# The lowest Keras 3 sok_lite works with, whatever TensorFlow accepts (TF 2.16 accepts 3.0):
# under Keras 3.9 loss scaling and weights files with optimizer state fail, and Keras before 3.9
# has no ragged keras.Input (docs/install.md, "Version checks").
KERAS_MIN = (3, 10)


def pip_requirement(package: str = "tensorflow-cpu") -> str:
    """The pip requirement for a supported TensorFlow, e.g. 'tensorflow-cpu>=2.16,<2.22'."""
    return f"{package}>={TF_MIN[0]}.{TF_MIN[1]},<{TF_MAX[0]}.{TF_MAX[1]}"


def keras_requirement() -> str:
    """The pip requirement for a Keras sok_lite works with, e.g. 'keras>=3.10'."""
    return f"keras>={KERAS_MIN[0]}.{KERAS_MIN[1]}"


def minors() -> list[tuple[int, int]]:
    """Every supported TensorFlow minor, oldest first."""
    return [(TF_MIN[0], minor) for minor in range(TF_MIN[1], TF_MAX[1])]


def minor_requirement(package: str = "tensorflow-cpu", minor: tuple[int, int] = TF_DEFAULT) -> str:
    """The pip requirement for one TensorFlow minor (or the tf_keras of it), e.g.
    'tensorflow-cpu==2.21.*'."""
    return f"{package}=={minor[0]}.{minor[1]}.*"
