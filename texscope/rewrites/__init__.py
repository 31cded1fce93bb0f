"""Stage 1's rewrites: constant folding in numpy, channel padding, bias rank,
decompositions of operators TVM cannot build, legalization keeping attributes."""

from .. import _submodules_on_access

__getattr__ = _submodules_on_access(__name__)
