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
from .ir.graph import TO_VDEVICE, relax_bindings
from .ir.rebuild import Rebuilder, replace_functions, with_vdevice
from .knowledge.targets import BUFFER_SCOPE, is_texture_scope

_HINT = tvm.ir.Op.get("relax.hint_on_device")


def _use_counts(mod: tvm.IRModule, gvar: relax.GlobalVar) -> dict[relax.Var, int]:
    counts: dict[relax.Var, int] = {}

    def count(expr):
        if isinstance(expr, relax.Var):
            counts[expr] = counts.get(expr, 0) + 1
        elif isinstance(expr, relax.Tuple):
            for field in expr.fields[:]:
                count(field)
        elif isinstance(expr, relax.TupleGetItem):
            count(expr.tuple_value)
        elif isinstance(expr, relax.Call):
            for arg in expr.args[:]:
                count(arg)

    for _, binding in relax_bindings(mod, [gvar]):
        count(binding.value)
    count(mod[gvar].body.body)
    return counts


def _is_copy(value) -> bool:
    return isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) \
        and value.op.name == TO_VDEVICE


def _foldable(mod: tvm.IRModule, gvar: relax.GlobalVar) -> dict[relax.Var, relax.VDevice]:
    """Per texture whose only reader is a copy to a buffer and whose producer
    can write that buffer, the buffer's VDevice."""
    producers: dict[relax.Var, relax.Call] = {}
    to_buffers = []
    for _, binding in relax_bindings(mod, [gvar]):
        if isinstance(binding.value, relax.Call):
            producers[binding.var] = binding.value
            if _is_copy(binding.value) \
                    and str(binding.value.attrs.dst_vdevice.memory_scope) == BUFFER_SCOPE:
                to_buffers.append(binding.value)
    if not to_buffers:
        # Counting uses walks every binding again (5 ms on a 64-conv chain,
        # which has no copy at all).
        return {}
    uses = _use_counts(mod, gvar)
    folds = {}
    for copy in to_buffers:
        source = copy.args[0]
        producer = producers.get(source)
        src_ty = source.ty
        if (uses.get(source, 0) == 1
                and producer is not None and isinstance(producer.op, tvm.ir.Op)
                and isinstance(src_ty, relax.TensorType) and src_ty.vdevice is not None
                and is_texture_scope(src_ty.vdevice.memory_scope)
                # Folding makes the producer write the buffer: its kernel must can.
                and registry.Storage.BUFFER in registry.support_for(producer, mod).output(0)):
            folds[source] = copy.attrs.dst_vdevice
    return folds


def _retarget(call: relax.Call, out_ty: relax.TensorType, vdevice: relax.VDevice) -> relax.Call:
    """The producer call writing its ``out_ty`` as a buffer on ``vdevice``."""
    # For call_tir ty_args is out_ty; other ops infer their output VDevice from it.
    return relax.Call(call.op, call.args, call.attrs, [with_vdevice(out_ty, vdevice)])


def fold_texture_copies(mod: tvm.IRModule) -> tvm.IRModule:
    """Write buffers directly where a texture is only ever copied to a buffer."""
    functions = {}
    for gvar, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue
        folds = _foldable(mod, gvar)
        if not folds:
            continue
        rebuilder = Rebuilder(mod)

        def rewrite(binding, folds=folds, rebuilder=rebuilder):
            value = binding.value
            if not isinstance(value, relax.Call):
                return rebuilder.substitute(value)
            if binding.var in folds:
                return _retarget(rebuilder.substitute_call(value), value.ty, folds[binding.var])
            if _is_copy(value) and value.args[0] in folds:
                return rebuilder.substitute(value.args[0])  # the buffer itself now
            return rebuilder.substitute_call(value)

        functions[gvar] = rebuilder.run(func, list(func.params), rewrite)
    return replace_functions(mod, functions) if functions else mod


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
