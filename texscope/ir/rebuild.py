"""Rebuild a Relax function binding by binding, with freshly typed variables.

Rewrites here change types (a VDevice added or removed), so every variable is
recreated with the type its new value normalizes to, and later uses are
substituted.  Works on the binding list of A-normal form directly.
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import relax
from tvm.relax.dpl import rewrite_call

from .graph import Constant


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
        return relax.Call(call.op, args, call.attrs, call.ty_args)

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
        var_type: Callable[[relax.Binding], type] = lambda binding: type(binding.var),
    ) -> relax.Function:
        """Rebuild ``func`` with ``params``; ``rewrite`` gives each binding's new value.

        ``rewrite`` may call :meth:`emit` to add bindings before the one it
        rewrites, and :meth:`substitute` for the default.  ``var_type`` gives the
        class of each binding's new variable (its old one's by default).
        """
        blocks = []
        for self.block, block in enumerate(func.body.blocks):
            self.bindings = []
            self.in_dataflow = isinstance(block, relax.DataflowBlock)
            for binding in block.bindings:
                var = binding.var
                value = self.builder.normalize(rewrite(binding))
                if isinstance(binding, relax.MatchCast):
                    cast_ty = _on_device_of(binding.ty, value.ty)
                    new_var = var_type(binding)(var.name, cast_ty)
                    self.bindings.append(relax.MatchCast(new_var, value, cast_ty))
                else:
                    new_var = var_type(binding)(var.name, value.ty)
                    self.bindings.append(relax.VarBinding(new_var, value))
                self.var_map[var] = new_var
            block_type = relax.DataflowBlock if self.in_dataflow else relax.BindingBlock
            blocks.append(block_type(self.bindings))
        body = self.builder.normalize(relax.SeqExpr(blocks, self.substitute(func.body.body)))
        return relax.Function(params, body, body.ty, func.is_pure, func.attrs)


def with_vdevice(ty: relax.TensorType, vdevice: relax.VDevice | None) -> relax.TensorType:
    """The same tensor type on another VDevice (None: on none)."""
    if ty.shape is None:
        return relax.TensorType(None, ty.dtype, vdevice, ndim=ty.ndim)
    return relax.TensorType(ty.shape, ty.dtype, vdevice)


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


def rewrite_functions(mod: tvm.IRModule, rewrites, needed=None) -> tvm.IRModule:
    """A new, normalized module whose Relax functions have every match of each
    ``(pattern, callback)`` of ``rewrites`` rewritten, in order, as
    ``tvm.relax.dpl.rewrite_call`` does (the callback gets the matched
    expression and the matches, and returns the replacement or the expression).

    ``needed``, where given, tells from a binding's value whether some
    rewrite may change it: a function with no such binding is only
    normalized.  dpl's matcher takes tens of milliseconds on a model's
    function even where nothing matches (a nested pattern, or one of a dozen
    operators)."""
    functions = {}
    for gvar, func in mod.functions.items():
        if isinstance(func, relax.Function) and (needed is None or any(
                needed(binding.value) for block in func.body.blocks
                for binding in block.bindings)):
            for pattern, callback in rewrites:
                func = rewrite_call(pattern, callback, func)
        functions[gvar] = func
    return relax.transform.Normalize()(
        tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos))
