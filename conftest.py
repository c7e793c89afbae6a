"""Collection rules for `pytest --doctest-modules sok_lite tests` (make test).

The flat module paths kept for users (sok_lite/checkpoint.py, optimizer.py, optimizers.py,
storage.py, sok_v1.py) replace themselves in sys.modules by the modules they name, whose
doctests run from their own files: collecting the aliases too would import one module under
two file names.
"""

collect_ignore = [
    "sok_lite/checkpoint.py",
    "sok_lite/optimizer.py",
    "sok_lite/optimizers.py",
    "sok_lite/storage.py",
    "sok_lite/sok_v1.py",
]
