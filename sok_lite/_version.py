"""The version of sok_lite: the one place that states it.

pyproject.toml reads it without importing the package; keep it a plain string literal.
"""

__version__ = "0.1.0"
