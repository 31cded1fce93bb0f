"""Stage 1's layout conversion: what TVM's ``ConvertLayout`` makes of a module,
computed in Python for the operators whose layout rule the registry gives.

TVM's pass builds layout objects (26 IterVars each), an arithmetic analyzer
and a JSON round trip of an index map for every binding it touches: several
hundred microseconds a binding, most of stage 1 on a real model.  The layouts
stage 1 asks for are few (plain, or a plain layout with one channel split
into whole texels), so they are kept here as TVM names them (``ABCD``,
``ABCD4b``) and each rule is a few string operations.

:func:`convert_layout` returns exactly the module TVM's pass returns: any
operator without a rule (:data:`texscope.knowledge.registry.LAYOUT_RULES`,
computed in :mod:`texscope.rewrites.layout_rules` on the layout names of
:mod:`texscope.rewrites.layout_names`), any layout or binding outside what
the rules describe, sends the whole module to TVM's pass instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import tvm
import tvm_ffi
from tvm import relax

from ..ir.graph import Constant, handle, new_call
from ..knowledge import registry
from .layout_names import (Layout, Unsupported, converted_shape, initial, initial_of_type,
                           rank, typed_like)
from .layout_rules import RULES, Inferred



_INDEX_MAPS: dict[tuple[str, str], str] = {}


def _index_map(src: str, dst: str) -> tvm.tirx.IndexMap:
    """The index map TVM's pass writes into a layout transform from ``src`` to
    ``dst``: a fresh object each time, as TVM's (a JSON round trip of one
    built once per pair; a shared one would not be structurally equal)."""
    key = (src, dst)
    if key not in _INDEX_MAPS:
        indices = [tvm.tirx.Var(f"i{i}", "int32") for i in range(rank(src))]
        final = tvm.s_tir.sbijective_layout(src, dst).forward_index(indices)
        _INDEX_MAPS[key] = tvm_ffi.serialization.to_json_graph_str(
            tvm.tirx.IndexMap(indices, final, None))
    return tvm_ffi.serialization.from_json_graph_str(_INDEX_MAPS[key])


_HAS_INFER_LAYOUT: dict[str, bool] = {}


def _has_infer_layout(op: tvm.ir.Op) -> bool:
    name = op.name
    if name not in _HAS_INFER_LAYOUT:
        _HAS_INFER_LAYOUT[name] = op.get_attr("FRelaxInferLayout") is not None
    return _HAS_INFER_LAYOUT[name]


class _BlockConverter:
    """One dataflow block through the rules, as TVM's LayoutConvertMutator
    walks it (one BlockBuilder per block)."""

    def __init__(self, layout_cb: Callable[[relax.Call], Mapping]):
        self.layout_cb = layout_cb
        # Keyed by the variables' handles.
        self.layouts: dict[int, Layout] = {}
        self.remap: dict[int, relax.Var] = {}
        self.bb = relax.BlockBuilder()

    # -- layouts of expressions ------------------------------------------
    def layout_of(self, expr: relax.Expr) -> Layout:
        if isinstance(expr, relax.Var):
            key = handle(expr)
            found = self.layouts.get(key)
            return found if found is not None or key in self.layouts else initial_of_type(expr.ty)
        if isinstance(expr, Constant):
            return initial(expr.ty.ndim)
        if isinstance(expr, relax.Tuple):
            return tuple(self.layout_of(field) for field in expr.fields[:])
        return None

    def replace(self, expr: relax.Expr) -> relax.Expr:
        if isinstance(expr, relax.Var):
            return self.remap.get(handle(expr), expr)
        if isinstance(expr, relax.Tuple):
            fields = [self.replace(f) for f in expr.fields]
            if any(not new.same_as(old) for new, old in zip(fields, expr.fields[:])):
                return relax.Tuple(fields, expr.span)
        return expr

    def rewrite(self, expr: relax.Expr, to: Layout) -> relax.Expr:
        """``expr`` (variables renamed) in layout ``to``: unchanged, or wrapped
        in a layout transform that the enclosing normalization binds."""
        if isinstance(expr, relax.Tuple) and isinstance(to, tuple) and len(to) == len(expr.fields):
            fields = [self.rewrite(field, layout) for field, layout in zip(expr.fields, to)]
            if all(new.same_as(old) for new, old in zip(fields, expr.fields[:])):
                return expr
            return relax.Tuple(fields, expr.span)
        new = self.replace(expr)
        source = self.layout_of(expr)
        if source == to or source == "":
            return new
        if isinstance(source, tuple) or isinstance(to, tuple) or source is None or to is None:
            raise Unsupported("conversion of a tuple or of an unknown rank")
        if rank(source) == rank(to):
            raise Unsupported("permutation")
        ty = new.ty
        if not isinstance(ty, relax.TensorType) or ty.shape is None:
            raise Unsupported("transform of a tensor without shape")
        # Typed here: its type inference builds TVM layout objects again.
        template = relax.op.layout_transform(new, _index_map(source, to))
        return new_call(template.op, template.args, template.attrs, template.ty_args,
                        ty=typed_like(ty, converted_shape(source, to, ty.shape.values)))

    def rewrite_args(self, args, to: Sequence[Layout]) -> list[relax.Expr]:
        if len(to) > len(args):
            raise Unsupported("more layouts than operands")
        new = [self.rewrite(arg, to[i]) if i < len(to) else arg for i, arg in enumerate(args)]
        # Bound here in operand order, as normalizing the call would bind
        # them: a call whose operands normalization rewrites loses its type.
        return [self.bb.emit(arg) if isinstance(arg, relax.Call) else arg for arg in new]

    # -- emitting ----------------------------------------------------------
    def reemit(self, binding: relax.VarBinding, value: relax.Expr) -> None:
        var = binding.var
        if value.same_as(binding.value):
            self.bb.emit_normalized(binding)
            return
        if not tvm_ffi.structural_equal(var.ty, value.ty):
            if not isinstance(var, relax.DataflowVar):
                # TVM's dataflow block pass refuses to retype a block's output.
                raise Unsupported("output variable retyped")
            new_var = relax.DataflowVar(var.name, value.ty)
            self.remap[handle(var)] = new_var
            var = new_var
        self.bb.emit_normalized(relax.VarBinding(var, value))

    def convert(self, block: relax.DataflowBlock) -> relax.DataflowBlock:
        self.bb._begin_dataflow_block()  # pylint: disable=protected-access
        try:
            self.visit_bindings(block)
        except Exception:
            self.bb._end_block()  # pylint: disable=protected-access
            raise
        return self.bb._end_block()  # pylint: disable=protected-access

    def visit_bindings(self, block: relax.DataflowBlock) -> None:
        for binding in block.bindings[:]:
            if not isinstance(binding, relax.VarBinding):
                raise Unsupported("match_cast")
            value = binding.value
            if isinstance(value, relax.Call):
                self.visit_call(binding, value)
            elif isinstance(value, relax.Tuple):
                self.visit_tuple(binding, value)
            elif isinstance(value, relax.TupleGetItem):
                self.visit_get_item(binding, value)
            elif isinstance(value, relax.Var):
                self.reemit(binding, self.bb.normalize(self.rewrite(value, initial_of_type(value.ty))))
            elif isinstance(value, (relax.If, relax.Function, relax.SeqExpr)):
                raise Unsupported(type(value).__name__)
            else:  # a constant or another leaf: left as it is
                self.reemit(binding, value)
            self.layouts.setdefault(handle(binding.var), initial_of_type(binding.var.ty))

    def visit_tuple(self, binding, value: relax.Tuple) -> None:
        dataflow = isinstance(binding.var, relax.DataflowVar)
        layouts = [self.layout_of(f) if dataflow else initial_of_type(f.ty) for f in value.fields]
        if not _nested_tensor(binding.var.ty):
            raise Unsupported("tuple binding of non-tensors")
        fields = self.rewrite_args(value.fields, layouts)
        self.reemit(binding, self.bb.normalize(relax.Tuple(fields)))
        self.layouts[handle(binding.var)] = tuple(layouts)

    def visit_get_item(self, binding, value: relax.TupleGetItem) -> None:
        layout = (self.layout_of(value.tuple_value) if isinstance(binding.var, relax.DataflowVar)
                  else initial_of_type(value.tuple_value.ty))
        if not isinstance(layout, tuple):
            raise Unsupported("item of a non-tuple layout")
        item = relax.TupleGetItem(self.rewrite(value.tuple_value, layout), value.index)
        self.reemit(binding, self.bb.normalize(item))
        self.layouts[handle(binding.var)] = layout[value.index]

    def visit_call(self, binding, call: relax.Call) -> None:
        inferred = None
        if isinstance(call.op, tvm.ir.Op):
            if any(isinstance(a.ty, relax.TensorType) and a.ty.ndim == -1 for a in call.args[:]):
                raise Unsupported("operand of unknown rank")
            if _has_infer_layout(call.op):
                inferred = self.infer(call)
        elif not isinstance(call.op, (relax.ExternFunc, tvm.ir.GlobalVar)):
            raise Unsupported("call of a local function")
        var = binding.var
        dataflow = isinstance(var, relax.DataflowVar)
        if inferred is None or (not _nested_tensor(var.ty) and not dataflow):
            args = self.rewrite_args(call.args, [initial_of_type(a.ty) for a in call.args])
            rewritten = new_call(call.op, args, call.attrs, call.ty_args, call.span)
            self.reemit(binding, self.bb.normalize(rewritten))
            self.layouts[handle(var)] = initial_of_type(var.ty)
            return
        args = self.rewrite_args(call.args, inferred.inputs)
        for index, arg in inferred.new_args.items():
            args[index] = arg
        value = self.bb.normalize(new_call(call.op, args, inferred.attrs, call.ty_args, call.span,
                                           ty=inferred.ty))
        if dataflow:
            self.reemit(binding, value)
            self.layouts[handle(var)] = inferred.output
            return
        initial = initial_of_type(var.ty)
        if inferred.output != initial:
            packed = self.bb.emit(value)
            self.layouts[handle(packed)] = inferred.output
            value = self.bb.normalize(self.rewrite(packed, initial))
        self.reemit(binding, value)
        self.layouts[handle(var)] = initial

    def infer(self, call: relax.Call) -> Inferred | None:
        """The rule's layouts for ``call``; None where it reads its operands
        in their own layouts."""
        rule = registry.LAYOUT_RULES.get(call.op.name)
        if rule is None:
            raise Unsupported(f"no layout rule for {call.op.name}")
        return RULES[rule.kind](self, call, rule)

    def leaf(self, expr) -> str:
        layout = self.layout_of(expr)
        if not isinstance(layout, str):
            raise Unsupported("operand not a tensor")
        return layout

    def no_desired(self, call) -> None:
        if call.op.name in self.layout_cb(call):
            raise Unsupported("desired layouts for an operator that follows its input")


def _nested_tensor(ty) -> bool:
    if isinstance(ty, relax.TensorType):
        return True
    if isinstance(ty, relax.TupleType):
        return all(_nested_tensor(field) for field in ty.fields[:])
    return False


def _function_with_blocks(func: relax.Function, blocks) -> relax.Function:
    body = relax.BlockBuilder().normalize(relax.SeqExpr(blocks, func.body.body, func.body.span))
    return relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span)


def convert_layout_or_none(mod: tvm.IRModule, layout_cb: Callable[[relax.Call], Mapping]
                           ) -> tvm.IRModule | None:
    """The module TVM's ``ConvertLayout({}, layout_cb)`` would return, or None
    where the rules do not cover it."""
    functions = {}
    for gvar, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue
        if not isinstance(func.body, relax.SeqExpr):
            return None
        blocks = []
        try:
            for block in func.body.blocks[:]:
                if isinstance(block, relax.DataflowBlock):
                    blocks.append(_BlockConverter(layout_cb).convert(block))
                else:
                    if any(isinstance(b.value, (relax.If, relax.Function, relax.SeqExpr))
                           for b in block.bindings):
                        return None
                    blocks.append(block)
        except Exception:  # pylint: disable=broad-except
            # Unsupported, or whatever else the rules trip on (an attribute
            # they do not expect, an operand TVM's type inference refuses):
            # TVM's pass decides, converting the module or raising its error.
            return None
        functions[gvar] = _function_with_blocks(func, blocks)
    updated = dict(mod.functions.items())
    updated.update(functions)
    return tvm.IRModule(updated, attrs=mod.attrs, global_infos=mod.global_infos)


def convert_layout(mod: tvm.IRModule, layout_cb: Callable[[relax.Call], Mapping]) -> tvm.IRModule:
    """``relax.transform.ConvertLayout({}, layout_cb)(mod)``, computed by the
    registry's layout rules where they cover the module, by TVM's pass where not."""
    converted = convert_layout_or_none(mod, layout_cb)
    if converted is not None:
        return converted
    return relax.transform.ConvertLayout({}, layout_cb)(mod)


def ConvertLayoutByRules(layout_cb: Callable[[relax.Call], Mapping]  # pylint: disable=invalid-name
                         ) -> tvm.ir.transform.Pass:
    """:func:`convert_layout` as a pass (so a build's profile names it).

    Parameters
    ----------
    layout_cb : callable
        ConvertLayout's ``layout_cb``: a call to its operator's desired layouts.

    Returns
    -------
    tvm.ir.transform.Pass
    """

    @tvm.transform.module_pass(opt_level=0, name="texscope.ConvertLayoutByRules")
    def convert(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return convert_layout(mod, layout_cb)

    return convert


@tvm.instrument.pass_instrument
class ConversionInput:
    """Keeps the module stage 1 hands its layout conversion (``module``) and
    skips the rest of stage 1, whose legalization costs seconds on a real
    model: for comparing conversions of one input (tests, the bench)."""

    def __init__(self):
        self.module = None

    def should_run(self, mod, info):
        if info.name == "texscope.ConvertLayoutByRules" and self.module is None:
            self.module = mod
        return self.module is None or info.name == "texscope.ConvertToPackedLayout"
