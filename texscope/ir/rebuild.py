"""Rebuild a Relax function binding by binding, with freshly typed variables.

Rewrites here change types (a VDevice added or removed), so every variable is
recreated with the type its new value normalizes to, and later uses are
substituted.  Works on the binding list of A-normal form directly.

Rewrites that keep types (stage 1's operator rewrites) replace a binding's
value in place: :func:`rewrite_bindings`.
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
import tvm_ffi
from tvm import relax

from ..errors import TexscopeError
from .graph import Constant, new_call, new_tensor_type


class Rebuilder:
    """Holds the substitution and the block being built.

    Parameters
    ----------
    mod : IRModule
        The module the function belongs to (for type inference of calls).
    """

    def __init__(self, mod: tvm.IRModule):
        self.builder = relax.BlockBuilder(mod)
        self.var_map: dict = {}
        self.bindings: list = []
        self.in_dataflow = True
        self.block = -1  # index of the block being built

    def substitute(self, expr: relax.Expr) -> relax.Expr:
        """``expr`` with replaced variables (and constants); leaves and tuples only."""
        if isinstance(expr, (relax.Var, Constant)):
            return self.var_map.get(expr, expr)
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self.substitute(f) for f in expr.fields])
        if isinstance(expr, relax.TupleGetItem):
            return relax.TupleGetItem(self.substitute(expr.tuple_value), expr.index)
        return expr

    def substitute_call(self, call: relax.Call, callee: relax.Expr | None = None) -> relax.Call:
        """``call`` with replaced arguments (and ``callee`` for its first one)."""
        args = [self.substitute(arg) for arg in call.args]
        if callee is not None:
            args[0] = callee
        return new_call(call.op, args, call.attrs, call.ty_args)

    def emit(self, name: str, value: relax.Expr) -> relax.Var:
        """Bind ``value`` in the block being built; returns the new variable."""
        value = self.builder.normalize(value)
        var_type = relax.DataflowVar if self.in_dataflow else relax.Var
        var = var_type(name, value.ty)
        self.bindings.append(relax.VarBinding(var, value))
        return var

    def run(
        self,
        func: relax.Function,
        params: list[relax.Var],
        rewrite: Callable[[relax.Binding], relax.Expr],
    ) -> relax.Function:
        """Rebuild ``func`` with ``params``; ``rewrite`` gives each binding's new value.

        ``rewrite`` may call :meth:`emit` to add bindings before the one it
        rewrites, and :meth:`substitute` for the default.  Each new variable
        is of its old one's class.
        """
        blocks = []
        for self.block, block in enumerate(func.body.blocks[:]):
            self.bindings = []
            self.in_dataflow = isinstance(block, relax.DataflowBlock)
            for binding in block.bindings[:]:
                var = binding.var
                value = self.builder.normalize(rewrite(binding))
                if isinstance(binding, relax.MatchCast):
                    cast_ty = _on_device_of(binding.ty, value.ty)
                    new_var = type(var)(var.name, cast_ty)
                    self.bindings.append(relax.MatchCast(new_var, value, cast_ty))
                else:
                    new_var = type(var)(var.name, value.ty)
                    self.bindings.append(relax.VarBinding(new_var, value))
                self.var_map[var] = new_var
            block_type = relax.DataflowBlock if self.in_dataflow else relax.BindingBlock
            blocks.append(block_type(self.bindings))
        body = self.builder.normalize(relax.SeqExpr(blocks, self.substitute(func.body.body)))
        return relax.Function(params, body, body.ty, func.is_pure, func.attrs)


def with_vdevice(ty: relax.TensorType, vdevice: relax.VDevice | None) -> relax.TensorType:
    """The same tensor type on another VDevice (None: on none)."""
    if ty.shape is None:
        return new_tensor_type(None, ty.dtype, vdevice, ndim=ty.ndim)
    return new_tensor_type(ty.shape, ty.dtype, vdevice)


def _on_device_of(ty, source_ty):
    """``ty`` on the VDevice of ``source_ty``: a cast does not move data."""
    if isinstance(ty, relax.TensorType) and isinstance(source_ty, relax.TensorType):
        return with_vdevice(ty, source_ty.vdevice)
    return ty


def with_attrs(attrs, **changes):
    """A new attributes object of ``attrs``'s type: its fields, ``changes``
    replacing some."""
    info = type(attrs).__tvm_ffi_type_info__
    fields = {f.name: getattr(attrs, f.name) for f in info.fields}
    fields.update(changes)
    return tvm.ir.make_node(info.type_key, **fields)


def replace_functions(mod: tvm.IRModule, functions: dict, global_infos=None) -> tvm.IRModule:
    """A new module with some functions (and global infos) replaced."""
    merged = dict(mod.functions)
    merged.update(functions)
    infos = dict(mod.global_infos)
    if global_infos is not None:
        infos.update(global_infos)
    return tvm.IRModule(merged, attrs=mod.attrs, global_infos=infos)


def rewrite_bindings(mod: tvm.IRModule, rewrite) -> tvm.IRModule:
    """A new, normalized module whose Relax functions have the value of
    each binding ``rewrite`` answers for replaced.

    ``rewrite(value, bound)`` gets a binding's value and ``bound``, the
    values of the variables bound before it in the function (to look
    through a chain of calls), and returns the new value or None.  The new
    value keeps the binding's variable, so it must have the same type; it
    may nest calls (normalization binds them), and bindings no longer used
    are removed.  TVM's pattern rewriter (``relax.dpl.rewrite_call``) does
    the same, but matches every pattern at every expression, rewrites to a
    fixed point and re-normalizes per match: on iris_landmark,
    PadWholeTexels took 36 ms with it and 7 with this, ExpandBroadcastRank
    33 and 12."""
    functions = {}
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function):
            func = _with_rewritten_bindings(func, rewrite, gvar.name_hint)
        functions[gvar] = func
    return relax.transform.Normalize()(
        tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos))


def bound_call(expr: relax.Expr, op: tvm.ir.Op, bound: dict) -> relax.Call | None:
    """The call of ``op`` that ``expr`` is, or that the variable ``expr`` is
    bound to in ``bound`` (as :func:`rewrite_bindings` hands it), else None."""
    expr = bound.get(expr, expr)
    return expr if isinstance(expr, relax.Call) and expr.op.same_as(op) else None


def _in_normal_form(expr: relax.Expr, builder: relax.BlockBuilder, bindings: list,
                    var_type: type) -> relax.Expr:
    """``expr`` with its nested calls bound first, into ``bindings``, in the
    order they are evaluated (arguments left to right)."""
    def leaf(arg):
        if isinstance(arg, relax.Tuple):
            return relax.Tuple([leaf(field) for field in arg.fields])
        if not isinstance(arg, relax.Call):
            return arg
        value = _in_normal_form(arg, builder, bindings, var_type)
        var = var_type(builder.get_unique_name("lv"), value.ty)
        bindings.append(relax.VarBinding(var, value))
        return var

    if isinstance(expr, relax.Call):
        expr = new_call(expr.op, [leaf(arg) for arg in expr.args], expr.attrs, expr.ty_args)
    return builder.normalize(expr)


def _with_rewritten_bindings(func: relax.Function, rewrite, name: str) -> relax.Function:
    builder = relax.BlockBuilder()
    bound: dict = {}
    blocks, changed = [], False
    for block in func.body.blocks[:]:
        bindings = []
        var_type = relax.DataflowVar if isinstance(block, relax.DataflowBlock) else relax.Var
        for binding in block.bindings[:]:
            if isinstance(binding, relax.VarBinding):
                value = rewrite(binding.value, bound)
                bound[binding.var] = binding.value
                if value is not None:
                    value = _in_normal_form(value, builder, bindings, var_type)
                    if not tvm_ffi.structural_equal(value.ty, binding.var.ty):
                        raise TexscopeError(
                            f"function {name}, binding {binding.var.name}: a rewrite changed "
                            f"its type from "
                            f"{binding.var.ty} to {value.ty}")
                    binding, changed = relax.VarBinding(binding.var, value), True
            bindings.append(binding)
        blocks.append(type(block)(bindings))
    if not changed:
        return func
    body = relax.SeqExpr(blocks, func.body.body)
    rewritten = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs,
                               func.span)
    return relax.analysis.remove_all_unused(rewritten)
