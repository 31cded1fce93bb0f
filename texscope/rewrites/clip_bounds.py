"""A clip (ReLU6) as a maximum then a minimum, so it follows packed layouts.

TVM 0.27's ``relax.clip`` has no layout inference (no ``FRelaxInferLayout``):
ConvertLayout wraps every clip in layout transforms to the plain layout and
back, so a packed conv writes its whole output, and another kernel unpacks,
clips and repacks it: two tensors of that size live where one would, and
one more launch per ReLU6 (``bench/memory.py``: mobilenet_v2's peak 0.50 MiB
against 0.36 for TVM's all-buffer build).  ``maximum`` and ``minimum`` with
scalar constants follow any layout, and fuse into the conv before them.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..ir.rebuild import rewrite_bindings

_CLIP = tvm.ir.Op.get("relax.clip")

def _bound(arg) -> float | None:
    """A constant bound's value: an IntImm or FloatImm (as TVM 0.27 types
    them), or one inside a PrimValue; None for a symbolic one."""
    value = getattr(arg, "value", None)
    if not isinstance(value, (int, float)):
        value = getattr(value, "value", None)
    return float(value) if isinstance(value, (int, float)) else None


def ClipAsMaxMin() -> tvm.ir.transform.Pass:  # pylint: disable=invalid-name
    """Rewrite ``clip(x, lo, hi)`` with constant bounds as
    ``minimum(maximum(x, lo), hi)`` (see the module docstring)."""

    def rewrite(call: relax.Expr, _values) -> relax.Expr | None:
        if not (isinstance(call, relax.Call) and call.op.same_as(_CLIP)):
            return None
        low, high = _bound(call.args[1]), _bound(call.args[2])
        dtype = getattr(call.args[0].ty, "dtype", None)
        if low is None or high is None or dtype is None:
            return None  # symbolic bounds: leave the clip
        raised = relax.op.maximum(call.args[0], relax.const(low, dtype))
        return relax.op.minimum(raised, relax.const(high, dtype))

    @tvm.transform.module_pass(opt_level=0, name="texscope.ClipAsMaxMin")
    def clip_as_max_min(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_bindings(mod, rewrite)

    return clip_as_max_min
