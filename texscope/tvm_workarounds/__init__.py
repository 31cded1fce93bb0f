"""Workarounds of TVM 0.27 behaviour, one module each.

Each module says what TVM does, why texscope needs otherwise, and the TVM
version it was seen on; ``tests/test_tvm_workarounds.py`` shows each cause
on TVM alone and fails once TVM no longer has it (drop the module then):

- ``opencl_intrinsics``: OpenCL names for math functions TVM lowers to C's
  (``atan2f``), which no OpenCL compiler declares;
- ``hidden_conditions``: ``if_then_else`` conditions kept out of TVM's
  analyzers where no pass needs them as facts (lowering time);
- ``unchecked_schedule``: schedule primitives without TVM's Python argument
  checks, made without holding the GIL (scheduling time);
- ``known_type``: a rebuilt expression given the type already known, through
  TVM's private ``_update_type`` (type inference time);
- ``heap``: glibc's heap thresholds raised for TVM's analyzer allocations
  (build time; its canary is a measurement, see the module).
"""

from .. import _submodules_on_access

__getattr__ = _submodules_on_access(__name__)
