"""Scripts and examples imported by path, without putting their folders on sys.path."""

import importlib.util


def module_from_file(path, name: str):
    """The Python file at `path`, run as a new module called `name`."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
