"""Lowering an annotated module to texture kernels and writing the build."""

from .. import _submodules_on_access

__getattr__ = _submodules_on_access(__name__)
