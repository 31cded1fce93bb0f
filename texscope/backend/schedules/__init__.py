"""Kernel schedules: which rule schedules each fused kernel, the rules
(conv, reduction, layout transform, fallback), their thread blocks and guards."""

from ... import _submodules_on_access

__getattr__ = _submodules_on_access(__name__)
