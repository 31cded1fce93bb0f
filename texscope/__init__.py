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
