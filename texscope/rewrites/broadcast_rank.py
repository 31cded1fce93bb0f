"""Give both operands of a broadcasting binary operator the same rank.

TFLite models add a conv's bias as a 1-D tensor to a 4-D NHWC activation.
ConvertLayout cannot put a 1-D operand into NCHW4c, so it unpacks the conv's
output to NHWC for the add and packs it again for the next conv: two layout
kernels around every conv.  Reshaping the lower-rank operand to the full rank
(leading axes of 1, as numpy broadcasting reads it) changes no value and lets
the add, and everything after it, stay packed; the reshape of a constant
folds away.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..knowledge import registry
from ..ir.graph import known_ndim, static_shape
from ..ir.rebuild import rewrite_bindings


def _lifted(operand, rank: int):
    shape = static_shape(operand.ty)
    if shape is None:
        return None
    return relax.op.reshape(operand, [1] * (rank - len(shape)) + list(shape))


def _expanded(call: relax.Call) -> relax.Expr | None:
    lhs, rhs = call.args
    ranks = known_ndim(lhs.ty), known_ndim(rhs.ty)
    if None in ranks or ranks[0] == ranks[1] or min(ranks) == 0:
        return None
    rank = max(ranks)
    operands = [arg if r == rank else _lifted(arg, rank) for arg, r in zip((lhs, rhs), ranks)]
    if None in operands:
        return None
    return relax.Call(call.op, operands, call.attrs)


def ExpandBroadcastRank() -> tvm.ir.transform.Pass:  # pylint: disable=invalid-name
    """Reshape the lower-rank operand of the registry's broadcasting binary
    operators to the other's rank (see the module docstring)."""
    ops = [tvm.ir.Op.get(name) for name in registry.BROADCAST_BINARY_OPS]

    def rewrite(value: relax.Expr, _bound) -> relax.Expr | None:
        if (isinstance(value, relax.Call) and any(value.op.same_as(op) for op in ops)
                and len(value.args) == 2):
            return _expanded(value)
        return None

    @tvm.transform.module_pass(opt_level=0, name="texscope.ExpandBroadcastRank")
    def expand(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_bindings(mod, rewrite)

    return expand
