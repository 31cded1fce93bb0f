"""texscope: texture or buffer, for every tensor of a TVM Relax model on mobile GPUs.

Names are imported on first use (PEP 562), so that the TVM-free parts (the
portable OpenCL replay, ``texscope.knowledge.scopes``, ``texscope.errors``) can be
imported where TVM is not installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
import warnings

from .errors import TexscopeError

# Public name -> the module that defines it.
_EXPORTS = {
    "BuildResult": "backend.build",
    "build": "backend.build",
    "get_default_pipeline": "backend.build",
    "run_on_opencl": "backend.build",
    "AnnotateTextureScope": "pipeline",
    "texture_scope_pipeline": "pipeline",
    "ConsumerInfo": "collect_consumer",
    "Demand": "collect_consumer",
    "collect_consumer": "collect_consumer",
    "ProducerInfo": "collect_producer",
    "ScopeChoice": "collect_producer",
    "collect_producer": "collect_producer",
    "ConvertToPackedLayout": "convert_layout",
    "LiftWeightTransforms": "rewrites.lift_weights",
    "PlanCost": "planner.cost",
    "plan_cost": "planner.cost",
    "define_vdevice": "define_vdevice",
    "OpKey": "knowledge.registry",
    "OpSupport": "knowledge.registry",
    "PatternKey": "knowledge.registry",
    "Storage": "knowledge.registry",
    "register_op": "knowledge.registry",
    "TextureTarget": "knowledge.targets",
    "texture_target": "knowledge.targets",
    "load_model": "frontend.model_file",
    "from_torch": "frontend.torch_model",
    "LegalizeOnce": "rewrites.legalize",
    "PadWholeTexels": "rewrites.texel_pad",
    "OrderForMemory": "backend.memory.call_order",
    "PlanStorages": "backend.memory.storage_plan",
    "SizeTextureStorages": "backend.memory.device_memory",
}

# Modules moved since the last release -> where they are now; the old name
# works, with a DeprecationWarning, for one release.
_MOVED = {
    "verify": "diagnostics.verify",
}

# The packages, by job; the five stage files, the pipeline, errors and the
# command line stay at the top.
PACKAGES = (
    "knowledge",  # what operators and devices support, and what they cost
    "ir",  # reading and rebuilding Relax IR
    "tvm_workarounds",  # TVM 0.27 behaviour texscope works around, one module each
    "rewrites",  # stage 1's rewrites and legalization
    "planner",  # plan costs and the min-cut
    "diagnostics",  # explain, reports, checks, comparisons, pass timing, yardsticks
    "frontend",  # model files
    "opencl",  # the emitted source, the portable plan and its replay, calibration
    "backend",  # lowering to kernels, writing a build
    "models",  # examples, the zoo, the MediaPipe corpus
)

__all__ = ["TexscopeError", *_EXPORTS, *PACKAGES]


def _is_submodule(package: str, name: str) -> bool:
    return not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}") is not None


def _submodules_on_access(package: str):
    """A PEP 562 ``__getattr__`` for ``package`` that imports its modules on
    first access, so that ``texscope.diagnostics.verify.equivalent`` works
    after a plain ``import texscope``."""

    def __getattr__(name: str):  # pylint: disable=invalid-name
        if _is_submodule(package, name):
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


# Functions named as their module (texscope.build, texscope.collect_consumer...):
# the import system sets the package attribute to the submodule when the
# submodule loads; the function must stay the public name.
_SHADOWED = frozenset(name for name, module in _EXPORTS.items() if name == module)


class _Package(types.ModuleType):
    def __setattr__(self, name, value):
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    elif name in _MOVED:
        warnings.warn(f"texscope.{name} is now texscope.{_MOVED[name]}; the old name goes "
                      "in the next release", DeprecationWarning, stacklevel=2)
        return importlib.import_module(f".{_MOVED[name]}", __name__)
    elif _is_submodule(__name__, name):
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *_EXPORTS})
