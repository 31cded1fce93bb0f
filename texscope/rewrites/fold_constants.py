"""Constant folding with TVM's results, without a compiler round trip per constant.

Relax's ``FoldConstant`` legalizes every operator call to find out whether it
folds, and compiles each distinct constant subexpression through LLVM on its
own: on a MediaPipe model whose float16 weights are cast, transposed and
packed, that is most of the build.  :func:`FoldConstants` gives the same
module (the tests compare it with ``FoldConstant``'s, constants bit for bit):

1. the values: walking each function's dataflow bindings in order, a call
   whose arguments are all constants is evaluated in numpy where
   :mod:`texscope.rewrites.constant_eval` knows its operator, else legalized as TVM
   does; the legalized calls of one round are compiled in one LLVM build and
   run, and the walk repeats while that made new constants;
2. the rewrite, as ``FoldConstant`` writes it: a variable bound to a constant
   becomes the constant wherever it is used, a variable bound to a shape
   becomes the shape where an operator takes it, unused bindings go.  Where
   every such variable had its constant's type, re-inferring the types of
   the calls that use it gives them back unchanged, so the substitution
   keeps them (in C++, a fraction of the time).

As ``FoldConstant``, it folds only calls inside dataflow blocks (here only
those of a function's top-level blocks) with one static tensor result.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax

from ..ir.graph import CALL_TIR, Constant, static_shape
from .constant_eval import evaluate

_CALL_TIR = tvm.ir.Op.get(CALL_TIR)
_EVAL_TARGET = "llvm"  # where FoldConstant runs what it folds


def _is_call_tir(expr) -> bool:
    return isinstance(expr, relax.Call) and expr.op.same_as(_CALL_TIR)


def _static_tensor(ty) -> tuple[tuple[int, ...], str] | None:
    shape = static_shape(ty)
    return None if shape is None else (shape, str(ty.dtype))


def _has_variable(expr) -> bool:
    if isinstance(expr, relax.Tuple):
        return any(_has_variable(field) for field in expr.fields[:])
    return isinstance(expr, relax.Var)


class _Pending:
    """A legalized call waiting for the batched build: its kernel, inputs, output."""

    def __init__(self, kernel: tvm.tirx.PrimFunc, inputs: list, out: tuple):
        self.kernel, self.inputs, self.out = kernel, inputs, out


class _FunctionValues:
    """The constant value of every variable of one function that has one."""

    def __init__(self, mod: tvm.IRModule, func: relax.Function):
        self.mod = mod
        self.constants: dict[relax.Var, Constant] = {}
        self.shapes: dict[relax.Var, relax.ShapeExpr] = {}
        self.candidates: list[relax.VarBinding] = []
        for block in func.body.blocks[:]:
            for binding in block.bindings[:]:
                if not isinstance(binding, relax.VarBinding):
                    continue
                value = binding.value
                if isinstance(value, Constant):
                    self.constants[binding.var] = value
                elif isinstance(value, relax.ShapeExpr):
                    self.shapes[binding.var] = value
                elif isinstance(block, relax.DataflowBlock) and isinstance(value, relax.Call) \
                        and isinstance(value.op, tvm.ir.Op):
                    self.candidates.append(binding)
        self.unfoldable: set[relax.Var] = set()

    def substituted(self, expr):
        """``expr`` with known constants (and shapes) in place of variables."""
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self.substituted(f) for f in expr.fields])
        if isinstance(expr, relax.Var):
            known = self.constants.get(expr)
            if known is None:
                known = self.shapes.get(expr)
            return expr if known is None else known
        return expr

    def folds_in_numpy(self) -> list[relax.VarBinding]:
        """One walk: evaluate what numpy can; return the bindings left to build."""
        to_build = []
        for binding in self.candidates:
            var, call = binding.var, binding.value
            if var in self.constants or var in self.unfoldable:
                continue
            args = [self.substituted(a) for a in call.args]
            if any(_has_variable(a) for a in args):
                continue
            if all(isinstance(a, (Constant, relax.ShapeExpr)) for a in args) \
                    and not call.op.same_as(_CALL_TIR):
                result = evaluate(call, [a.value.numpy() for a in args if isinstance(a, Constant)])
                if result is not None:
                    self.constants[var] = relax.const(result)
                    continue
            to_build.append(binding)
        return to_build

    def legalized(self, binding: relax.VarBinding) -> _Pending | None:
        """What FoldConstant would run for this call, or None where it folds nothing."""
        call = binding.value
        args = [self.substituted(a) for a in call.args]
        if call.op.same_as(_CALL_TIR):
            lowered, kernels = relax.Call(call.op, args, call.attrs, call.ty_args), self.mod
        else:
            legalize = call.op.get_attr("FLegalize")
            if legalize is None:
                return None
            # Without the module as context: its kernels need not be hashed.
            builder = relax.BlockBuilder()
            try:
                lowered = builder.normalize(
                    legalize(builder, builder.normalize(
                        relax.Call(call.op, args, call.attrs, call.ty_args))))
            except Exception:  # pylint: disable=broad-except
                return None  # a legalization that must emit bindings: not foldable
            kernels = builder.get()
        if not _is_call_tir(lowered) or len(lowered.ty_args) != 1:
            return None
        kernel = kernels.functions.get(lowered.args[0]) if isinstance(
            lowered.args[0], tvm.ir.GlobalVar) else None
        inputs = lowered.args[1].fields if isinstance(lowered.args[1], relax.Tuple) else None
        out = _static_tensor(lowered.ty_args[0])
        if not isinstance(kernel, tvm.tirx.PrimFunc) or inputs is None or out is None \
                or not all(isinstance(a, Constant) for a in inputs):
            return None
        return _Pending(kernel, [a.value for a in inputs], out)


def _compiled(kernels: list[tvm.tirx.PrimFunc]) -> list:
    """Each kernel as a callable, one LLVM build for all (None where one fails)."""
    names = [f"texscope_fold_{i}" for i in range(len(kernels))]

    def build(indices):
        module = tvm.IRModule({
            tvm.ir.GlobalVar(names[i]): kernels[i].with_attr("global_symbol", names[i])
            for i in indices
        })
        runtime = tvm.tirx.build(module, target=_EVAL_TARGET)
        return {i: runtime[names[i]] for i in indices}

    try:
        built = build(range(len(kernels)))
    except Exception:  # pylint: disable=broad-except
        # As FoldConstant: a kernel LLVM cannot build (already scheduled for
        # a GPU, say) is not folded; the others still are.
        built = {}
        for i in range(len(kernels)):
            try:
                built.update(build([i]))
            except Exception:  # pylint: disable=broad-except
                pass
    return [built.get(i) for i in range(len(kernels))]


def _run_batched(values: list[_FunctionValues], work: list[tuple[int, relax.Var, _Pending]]):
    kernels: list[tvm.tirx.PrimFunc] = []
    index_of: dict[int, list[int]] = {}
    slots = []
    for _, _, pending in work:
        bucket = index_of.setdefault(tvm_ffi.structural_hash(pending.kernel), [])
        slot = next((k for k in bucket if tvm_ffi.structural_equal(kernels[k], pending.kernel)),
                    None)
        if slot is None:
            slot = len(kernels)
            kernels.append(pending.kernel)
            bucket.append(slot)
        slots.append(slot)
    functions = _compiled(kernels)
    for (owner, var, pending), slot in zip(work, slots):
        function = functions[slot]
        if function is None:
            values[owner].unfoldable.add(var)
            continue
        shape, dtype = pending.out
        result = tvm.runtime.empty(shape, dtype)
        function(*pending.inputs, result)
        values[owner].constants[var] = relax.const(result)


def _fold_all(mod: tvm.IRModule, functions: dict) -> list[_FunctionValues]:
    values = [_FunctionValues(mod, func) for func in functions.values()]
    while True:
        work = []
        for owner, known in enumerate(values):
            for binding in known.folds_in_numpy():
                pending = known.legalized(binding)
                if pending is None:
                    known.unfoldable.add(binding.var)
                else:
                    work.append((owner, binding.var, pending))
        if not work:
            return values
        _run_batched(values, work)


@relax.expr_functor.mutator
class _Rewrite(relax.PyExprMutator):
    """Constants and shapes in place of the variables bound to them."""

    def __init__(self, mod: tvm.IRModule, known: _FunctionValues):
        super().__init__(mod)
        self.known = known

    def visit_var_(self, op: relax.Var) -> relax.Expr:
        constant = self.known.constants.get(op)
        return constant if constant is not None else super().visit_var_(op)

    def visit_dataflow_var_(self, op: relax.DataflowVar) -> relax.Expr:
        constant = self.known.constants.get(op)
        return constant if constant is not None else super().visit_dataflow_var_(op)

    def visit_call_(self, op: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(op)
        if not isinstance(call.op, tvm.ir.Op) or call.op.same_as(_CALL_TIR):
            return call
        old = call.args[:]
        args = [self._shape_of(a) for a in old]
        if all(a.same_as(b) for a, b in zip(args, old)):
            return call
        return relax.Call(call.op, args, call.attrs, call.ty_args, call.span)

    def _shape_of(self, arg):
        if isinstance(arg, relax.Var):
            bound = self.lookup_binding(arg)
            if isinstance(bound, relax.ShapeExpr):
                return bound
        return arg


def _takes_a_shape_variable(func: relax.Function, known: _FunctionValues) -> bool:
    return any(
        isinstance(binding.value, relax.Call) and isinstance(binding.value.op, tvm.ir.Op)
        and not binding.value.op.same_as(_CALL_TIR)
        and any(isinstance(arg, relax.Var) and arg in known.shapes for arg in binding.value.args[:])
        for block in func.body.blocks[:] for binding in block.bindings[:])


def _typed_as_their_constants(known: _FunctionValues) -> bool:
    return all(tvm_ffi.structural_equal(var.ty, value.ty) for var, value in known.constants.items())


def _with_constants_in_place(func: relax.Function, known: _FunctionValues) -> relax.Function:
    """``func`` with each use of a variable bound to a constant replaced by it,
    types kept.

    :class:`_Rewrite` re-infers the type of every call it changes, most of
    folding's time; where every such variable has its constant's type and no
    operator takes a shape variable, inference gives the types back as they
    were, so they are kept.
    """

    def use(var, region):
        return var if region != tvm_ffi.DefRegionKind.NONE else known.constants.get(var, var)

    return tvm_ffi.structural_map(func, with_def_region_kind=(relax.Var, use))


def _rewritten(mod: tvm.IRModule, func: relax.Function, known: _FunctionValues):
    if known.shapes and _takes_a_shape_variable(func, known) \
            or not _typed_as_their_constants(known):
        func = _Rewrite(mod, known).visit_expr(func)
    elif known.constants:
        func = _with_constants_in_place(func, known)
    return relax.analysis.remove_all_unused(func)


def fold_constants(mod: tvm.IRModule) -> tvm.IRModule:
    """``relax.transform.FoldConstant()(mod)``, computed as the module docstring says."""
    functions = {g: f for g, f in mod.functions.items() if isinstance(f, relax.Function)}
    values = _fold_all(mod, functions)
    rewritten = dict(mod.functions)
    for (gvar, func), known in zip(functions.items(), values):
        rewritten[gvar] = _rewritten(mod, func, known)
    return tvm.IRModule(rewritten, attrs=mod.attrs, global_infos=mod.global_infos)


@tvm.transform.module_pass(opt_level=0, name="texscope.FoldConstants")
def FoldConstants(mod: tvm.IRModule, _ctx) -> tvm.IRModule:  # pylint: disable=invalid-name
    """Relax's FoldConstant, constants evaluated in numpy or one batched build."""
    return fold_constants(mod)
