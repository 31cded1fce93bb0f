"""Stage 5: realize the hints, drop redundant assignments, fold useless copies.

``RealizeVDevice`` (run only where a ``hint_on_device`` is left: stage 4
writes copies itself) turns each hint into nothing (an assignment ``lv = x``)
when the argument already lives where its consumer reads it, and into a
``to_vdevice`` copy otherwise; ``CanonicalizeBindings`` removes such
assignments, which would otherwise split fusion groups.  Last, a texture whose
only reader is a copy to a buffer is written as a buffer directly when its
producer's kernel can write buffers.
"""

from __future__ import annotations

import tvm
from tvm import relax

from .knowledge import registry
from .ir.graph import relax_bindings
from .ir.rebuild import with_vdevice
from .knowledge.targets import BUFFER_SCOPE, is_texture_scope

TO_VDEVICE = "relax.to_vdevice"
_HINT = tvm.ir.Op.get("relax.hint_on_device")


def _use_counts(func: relax.Function) -> dict[relax.Var, int]:
    counts: dict[relax.Var, int] = {}

    def count(expr):
        if isinstance(expr, relax.Var):
            counts[expr] = counts.get(expr, 0) + 1
        elif isinstance(expr, relax.Tuple):
            for field in expr.fields:
                count(field)
        elif isinstance(expr, relax.TupleGetItem):
            count(expr.tuple_value)
        elif isinstance(expr, relax.Call):
            for arg in expr.args:
                count(arg)

    for block in func.body.blocks:
        for binding in block.bindings:
            count(binding.value)
    count(func.body.body)
    return counts


def _retarget(call: relax.Call, vdevice: relax.VDevice) -> relax.Call | None:
    """The producer call writing a buffer on ``vdevice``, or None if it cannot."""
    out_ty = call.ty
    if not isinstance(out_ty, relax.TensorType):
        return None
    if not isinstance(call.op, tvm.ir.Op):
        return None
    # For call_tir ty_args is out_ty; other ops infer their output VDevice from it.
    return relax.Call(call.op, call.args, call.attrs, [with_vdevice(out_ty, vdevice)])


def fold_texture_copies(mod: tvm.IRModule) -> tvm.IRModule:
    """Write buffers directly where a texture is only ever copied to a buffer."""
    functions = dict(mod.functions)
    changed = False
    for gvar, func in functions.items():
        if not isinstance(func, relax.Function):
            continue
        uses = _use_counts(func)
        blocks = []
        for block in func.body.blocks:
            producers = {}
            bindings = []
            for binding in block.bindings:
                var, value = binding.var, binding.value
                if isinstance(value, relax.Call):
                    producers[var] = len(bindings)
                folded = _fold(mod, value, producers, bindings, uses)
                if folded is not None:
                    bindings.append(relax.VarBinding(var, folded))
                    changed = True
                else:
                    bindings.append(binding)
            blocks.append(type(block)(bindings))
        functions[gvar] = relax.Function(
            func.params, relax.SeqExpr(blocks, func.body.body), func.ret_ty, func.is_pure,
            func.attrs,
        )
    if not changed:
        return mod
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


def _fold(mod, value, producers, bindings, uses):
    """If ``value`` copies a single-use texture to a buffer, return the source var
    after rewriting its producer in ``bindings`` to write the buffer."""
    if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)
            and value.op.name == TO_VDEVICE):
        return None
    source = value.args[0]
    dst = value.attrs.dst_vdevice
    if str(dst.memory_scope) != BUFFER_SCOPE or uses.get(source, 0) != 1:
        return None
    position = producers.get(source)
    if position is None:
        return None
    producer = bindings[position].value
    src_ty = source.ty
    if not (isinstance(src_ty, relax.TensorType) and src_ty.vdevice is not None
            and is_texture_scope(src_ty.vdevice.memory_scope)):
        return None
    if registry.Storage.BUFFER not in registry.support_for(producer, mod).output(0):
        return None
    new_producer = _retarget(producer, dst)
    if new_producer is None:
        return None
    new_var = type(source)(source.name, with_vdevice(src_ty, dst))
    bindings[position] = relax.VarBinding(new_var, new_producer)
    return new_var


def _has_hints(mod: tvm.IRModule) -> bool:
    return any(
        isinstance(binding.value, relax.Call) and binding.value.op.same_as(_HINT)
        for _, binding in relax_bindings(mod)
    )


def Cleanup() -> tvm.ir.transform.Pass:  # pylint: disable=invalid-name
    """Stage 5 as one pass: realize hints, canonicalize, fold copies."""

    @tvm.transform.module_pass(opt_level=0, name="texscope.Cleanup")
    def cleanup(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        if _has_hints(mod):
            mod = relax.transform.RealizeVDevice()(mod)
        mod = relax.transform.CanonicalizeBindings()(mod)
        return FoldTextureCopies()(mod)

    return cleanup


def FoldTextureCopies() -> tvm.ir.transform.Pass:  # pylint: disable=invalid-name
    """:func:`fold_texture_copies` as a pass, for the build after fusion."""

    @tvm.transform.module_pass(opt_level=0, name="texscope.FoldTextureCopies")
    def fold(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        folded = fold_texture_copies(mod)
        return mod if folded is mod else relax.transform.CanonicalizeBindings()(folded)

    return fold
