"""What operators and devices support, and what they cost: the operator
registry, the target presets, cost profiles and memory-scope names."""

from .. import _submodules_on_access

__getattr__ = _submodules_on_access(__name__)
