"""``if_then_else`` conditions kept out of TVM's analyzers where no pass
needs them as facts (seen on TVM 0.27).

TVM's passes built on its arithmetic analyzer (simplification, no-op
removal, virtual-thread injection, buffer and texture flattening, split
renormalization, ...) enter the condition of every ``if_then_else`` as a
fact while they visit its branches, and every later comparison they
simplify there is checked against it.  A padded conv's register cache reads
its texel under a four-term bounds test, a padded pool each window element
under another: with its one condition hidden, texscope's lowering pipeline
took 47% less time on inception's padded conv (18 ms against 33, medians of
15 on a loaded 2-core machine), and compiling the pool kernel alone 19% less.

Hidden, ``if_then_else(c, a, b)`` is the pure external call
``texscope_if_then_else(c, a, b)``: every pass still rewrites its operands
(variables substituted, buffers flattened, indices simplified) as it
rewrites any call's, but none takes ``c`` as a fact.  Shown again, it is the
``if_then_else`` it was, or, where ``c`` has become a constant, the branch
that constant selects, as TVM's simplifier selects it.  Hiding can only
leave a branch less simplified, never change what it computes.
:mod:`texscope.backend.lowering.tir_pipeline` says where in the pipeline conditions are
hidden and which kernels keep them.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

_IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")
_PURE_EXTERN = tvm.ir.Op.get("tirx.call_pure_extern")
HIDDEN_IF_THEN_ELSE = "texscope_if_then_else"


def _hidden(call):
    if not call.op.same_as(_IF_THEN_ELSE):
        return call
    return tvm.ir.Call(_PURE_EXTERN, [tvm.ir.StringImm(HIDDEN_IF_THEN_ELSE), *call.args],
                       call.attrs, span=call.span, ret_ty=call.ty)


def _shown(call):
    if not (call.op.same_as(_PURE_EXTERN) and isinstance(call.args[0], tvm.ir.StringImm)
            and call.args[0].value == HIDDEN_IF_THEN_ELSE):
        return call
    condition, then_value, else_value = call.args[1:]
    if isinstance(condition, tirx.IntImm):
        return then_value if int(condition) else else_value
    return tvm.ir.Call(_IF_THEN_ELSE, [condition, then_value, else_value], call.attrs,
                       span=call.span, ret_ty=call.ty)


def conditions_hidden(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with every ``if_then_else`` hidden (see the module docstring)."""
    return tvm_ffi.structural_map(func, (tvm.ir.Call, _hidden))


def conditions_shown(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with every hidden ``if_then_else`` shown again."""
    return tvm_ffi.structural_map(func, (tvm.ir.Call, _shown))
