"""Device memory of a build: the VM's allocations, texscope's storage plan,
the call order that lowers the peak, and a replay in planned storages."""

from ... import _submodules_on_access

__getattr__ = _submodules_on_access(__name__)
