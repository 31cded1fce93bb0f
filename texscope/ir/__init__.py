"""Reading and rebuilding Relax IR: bindings, users, function rebuilding,
and keeping TVM quiet."""

from .. import _submodules_on_access

__getattr__ = _submodules_on_access(__name__)
