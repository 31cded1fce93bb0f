"""texscope: texture or buffer, for every tensor of a TVM Relax model on mobile GPUs."""

from . import examples, zoo
from .build import BuildResult, build, get_default_pipeline
from .collect_consumer import ConsumerInfo, Demand, collect_consumer
from .collect_producer import ProducerInfo, ScopeChoice, collect_producer
from .convert_layout import ConvertToPackedLayout
from .cost import PlanCost, plan_cost
from .define_vdevice import define_vdevice
from .errors import TexscopeError
from .pipeline import AnnotateTextureScope, texture_scope_pipeline
from .registry import OpKey, OpSupport, PatternKey, Storage, register_op
from .targets import TextureTarget, texture_target

__all__ = [
    "examples",
    "zoo",
    "BuildResult",
    "build",
    "get_default_pipeline",
    "AnnotateTextureScope",
    "ConsumerInfo",
    "ConvertToPackedLayout",
    "Demand",
    "OpKey",
    "PlanCost",
    "OpSupport",
    "PatternKey",
    "ProducerInfo",
    "ScopeChoice",
    "Storage",
    "TexscopeError",
    "TextureTarget",
    "collect_consumer",
    "collect_producer",
    "define_vdevice",
    "plan_cost",
    "register_op",
    "texture_scope_pipeline",
    "texture_target",
]

# Submodules the README calls through the package (``texscope.verify...``),
# imported on first use (PEP 562): they pull in more of TVM, or pyopencl.
_LAZY_SUBMODULES = frozenset({"explain", "opencl", "report", "verify"})


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        import importlib  # pylint: disable=import-outside-toplevel

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
