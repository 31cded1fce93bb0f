"""Kernels measured on the device: the tuning set of a model (every kernel in
every storage), the measured costs the planner reads back, and the fixed
kernel set ``texscope calibrate --kernels`` times."""

from ... import _submodules_on_access

__getattr__ = _submodules_on_access(__name__)
