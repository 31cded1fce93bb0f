"""texscope's OpenCL: checks on the emitted source, the portable plan of a
build, and its replay on a real OpenCL implementation (PoCL in CI, any GPU
where there is one).

pyopencl and an OpenCL driver with image support are needed only here.
``plan``, ``sizes``, ``resolve``, ``replay``, ``session``, ``memory`` and ``source`` import
no TVM (the replay runs where only numpy and pyopencl are installed);
``executor``, ``program``, ``launches`` and ``tir_sizes`` read a build and
need TVM.  Names load on first use, so that
``python -m texscope.opencl.replay`` imports nothing it does not run.
"""

from __future__ import annotations

import importlib

from .. import _submodules_on_access

_EXPORTS = {
    "KernelTime": "replay",
    "RunResult": "replay",
    "Session": "session",
    "compile_source": "source",
    "default_device": "source",
    "device_target": "source",
    "image_misuse": "source",
    "plan_of": "executor",
    "repeated_texel_stores": "source",
    "run": "executor",
}

__all__ = sorted(_EXPORTS)


_submodule = _submodules_on_access(__name__)


def __getattr__(name: str):
    if name not in _EXPORTS:
        return _submodule(name)  # the modules themselves, loaded on first access
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value
