"""From scheduled TIR to device kernels: one PrimFunc per storage signature,
the Adreno TIR pipeline, kernel names of bounded length."""

from ... import _submodules_on_access

__getattr__ = _submodules_on_access(__name__)
