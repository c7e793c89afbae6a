"""The TensorFlow versions sok_lite supports: the one place that states them.

setup.py and the Makefile run this file on its own (runpy): keep it free of imports.
"""

TF_MIN = (2, 21)  # inclusive
TF_MAX = (2, 22)  # exclusive


def pip_requirement(package: str = "tensorflow-cpu") -> str:
    """The pip requirement for a supported TensorFlow, e.g. 'tensorflow-cpu>=2.21,<2.22'."""
    return f"{package}>={TF_MIN[0]}.{TF_MIN[1]},<{TF_MAX[0]}.{TF_MAX[1]}"
