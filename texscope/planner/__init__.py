"""The solver: plan costs and the exact min-cut."""

from .. import _submodules_on_access

__getattr__ = _submodules_on_access(__name__)
