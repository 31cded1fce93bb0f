"""Weight packing moved out of the model's run, into a function run once.

Stage 1 packs every conv weight into OIHW4o.  A weight that is a constant is
packed at build time (folded); a weight that is a parameter is packed by a
kernel on every run, into a tensor the all-buffer build never allocates: on
a chain of 64 convs with parameter weights, one packed weight (36 KiB) above
TVM's generic build at the peak.

Where a Relax function says which of its parameters are weights (TVM's
``num_input`` attribute: the parameters after the first ``num_input``),
:func:`LiftWeightTransforms` runs Relax's ``LiftTransformParams`` on stage
1's output: everything computed from weights alone (packing, padding,
casts) moves into ``<function>_transform_params``, which takes the weights
as one tuple and returns the packed tensors, and the function takes those
in their place.  A user runs the transform once when loading the weights,
and passes its results to every run (TVM's convention for lifted weights).

The packed weights are the function's parameters then, and a caller hands
the VM buffers: the planner keeps a weight parameter in a buffer
(:func:`texscope.collect_producer.writable`), so that nothing is copied into
an image on every run; the conv reads its weight from the buffer.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..errors import TexscopeError
from ..ir.graph import NUM_INPUT


def require_declared_weights(mod: tvm.IRModule) -> list[relax.GlobalVar]:
    """The Relax functions of ``mod`` declaring weights (``num_input``).

    Raises TexscopeError where none does (texscope cannot tell weights from
    inputs), where a ``num_input`` counts more parameters than its function
    has, or where a function's ``_transform_params`` name is taken.
    """
    declaring = []
    names = {gvar.name_hint for gvar in mod.functions}
    for gvar, func in mod.functions.items():
        if not isinstance(func, relax.Function) or func.attrs is None \
                or NUM_INPUT not in func.attrs:
            continue
        count = func.attrs[NUM_INPUT]
        if not isinstance(count, (int, tvm.tirx.IntImm)) or not 0 <= int(count) <= len(func.params):
            raise TexscopeError(
                f"attribute num_input={count!r} must count the function's leading inputs "
                f"(0 to {len(func.params)})", gvar.name_hint)
        if f"{gvar.name_hint}_transform_params" in names:
            raise TexscopeError(f"the module already has a function "
                                f"'{gvar.name_hint}_transform_params', the name its lifted "
                                "weight transforms take", gvar.name_hint)
        declaring.append(gvar)
    if not declaring:
        raise TexscopeError(
            "lifting weight transforms needs the model's function to say which parameters are "
            "weights: set the attribute num_input (the count of leading inputs; the parameters "
            "after them are weights), e.g. mod['main'] = mod['main'].with_attr('num_input', 1)")
    return declaring


@tvm.transform.module_pass(opt_level=0, name="texscope.LiftWeightTransforms")
def LiftWeightTransforms(mod: tvm.IRModule, _ctx) -> tvm.IRModule:  # pylint: disable=invalid-name
    """What each function with ``num_input`` computes from its weights alone,
    lifted into ``<function>_transform_params`` (see the module docstring);
    :func:`require_declared_weights` first."""
    require_declared_weights(mod)
    return relax.transform.LiftTransformParams()(mod)
