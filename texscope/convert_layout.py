"""Stage 1: packed 5-D layouts, then legalization that keeps operator attributes.

ConvertLayout packs activations as NCHW4c and conv2d weights as OIHW4o (the
layouts come from the registry); pools follow their input.  Operators the
registry keeps stay Relax calls.  Operators whose decisions need their
attributes are legalized with the operator and those attributes recorded on
the PrimFunc as a printable ``texscope_op`` dict (Relax type inference of those
operators ignores a VDevice in ``ty_args``, so they cannot stay calls).  Every
PrimFunc then gets an ``op_pattern``.
"""

from __future__ import annotations

import tvm
from tvm import relax

from . import registry
from .graph import require_shapes
from .targets import texture_target


def _recording(op_name: str, fields: list[str]):
    default = tvm.ir.Op.get(op_name).get_attr("FLegalize")

    def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        lowered = default(bb, call)
        if isinstance(lowered, relax.Call) and isinstance(lowered.op, tvm.ir.Op) \
                and lowered.op.name == "relax.call_tir":
            gvar = lowered.args[0]
            record = {"op": op_name, **{f: str(getattr(call.attrs, f)) for f in fields}}
            bb.update_func(gvar, bb.get()[gvar].with_attr(registry.OP_RECORD_ATTR, record))
        return lowered

    return legalize


def LegalizeKeepingAttrs() -> tvm.ir.transform.Pass:  # pylint: disable=invalid-name
    """LegalizeOps for all but the kept operators, recording attributes where
    the registry decides by them, then AnnotateTIROpPattern."""

    @tvm.transform.module_pass(opt_level=0, name="texscope.LegalizeKeepingAttrs")
    def legalize(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        recording = {op: _recording(op, f) for op, f in registry.recorded_attrs().items()}
        mod = relax.transform.LegalizeOps(recording, skip_ops=registry.kept_ops())(mod)
        return relax.transform.AnnotateTIROpPattern()(mod)

    return legalize


def ConvertToPackedLayout(target) -> tvm.ir.transform.Pass:  # pylint: disable=invalid-name
    """Stage 1 as one pass.

    Parameters
    ----------
    target : tvm.target.Target or str
        A texture-capable GPU target; legalization runs under it.

    Returns
    -------
    tvm.ir.transform.Pass
    """
    texture = texture_target(target)

    @tvm.transform.module_pass(opt_level=0, name="texscope.ConvertToPackedLayout")
    def convert(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        require_shapes(mod)
        passes = tvm.transform.Sequential(
            [
                relax.transform.DecomposeOpsForInference(),
                relax.transform.ConvertLayout({}, registry.desired_layouts),
                relax.transform.Normalize(),
                relax.transform.FoldConstant(),
                LegalizeKeepingAttrs(),
            ]
        )
        with texture.target:
            return passes(mod)

    return convert
