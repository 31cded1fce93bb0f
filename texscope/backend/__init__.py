"""Lowering an annotated module to texture kernels and writing the build.

``build`` (the whole build, its result and its output directory), ``fusion``
(TVM's fusion passes run under the build's target), ``outdir`` (directories
texscope may write into), ``parallel`` (kernels on several threads) and
``upstream`` (TVM's own Adreno flow, for comparison) sit here; the rest is
grouped by job:

- ``schedules``: which rule schedules each fused kernel, and the rules;
- ``lowering``: from scheduled TIR to device kernels;
- ``memory``: device memory of a build and texscope's storage plan;
- ``tuning``: kernels measured on the device (``texscope tune``,
  ``texscope calibrate --kernels``).

Workarounds of TVM behaviour are in :mod:`texscope.tvm_workarounds`.
"""

from .. import _submodules_on_access

__getattr__ = _submodules_on_access(__name__)
