"""The call sequence of a built model, read off its Relax ``main``.

Each tensor keeps the memory scope its Relax type carries (the VDevice the
texture pipeline wrote), so the executor allocates what the program says, not
what the planner meant: where the two disagree, the run fails or its numbers
do.

A model built for any input size has shapes that are expressions of
``main``'s size variables (``h``, ``(h - 1) // 2 + 1``): each tensor's spec
writes them as size text (``tir_sizes.py``), and the program keeps the TIR
expressions too, for the executor to bind the kernels' own variables to.
"""

from __future__ import annotations

import attrs
import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from ..errors import TexscopeError
from ..ir.graph import CALL_TIR, TO_VDEVICE, Constant as RelaxConstant, relax_bindings
from ..knowledge.scopes import BUFFER_SCOPE
from .plan import TensorSpec
from .tir_sizes import size_text


@attrs.frozen
class Input:
    """``main``'s parameter ``index``."""

    index: int
    tensor: TensorSpec


@attrs.frozen
class Constant:
    """A constant argument, uploaded before the run."""

    tensor: TensorSpec
    value: np.ndarray = attrs.field(eq=False, repr=False)


@attrs.frozen
class KernelCall:
    """``call_tir``: a host function run on its arguments, then its outputs.

    ``params`` match the host function's parameters one to one: a tensor, or
    the TIR expression of a size the call passes as a value (``call_tir``'s
    ``R.prim_value`` arguments, which TVM adds where a kernel needs a size
    variable that its tensors' shapes do not give alone).
    """

    binding: str
    function: str
    params: tuple = attrs.field(converter=tuple)

    @property
    def tensors(self) -> tuple[TensorSpec, ...]:
        return tuple(p for p in self.params if isinstance(p, TensorSpec))


@attrs.frozen
class Copy:
    """``to_vdevice``: the same values moved into another storage."""

    binding: str
    source: TensorSpec
    target: TensorSpec


@attrs.frozen
class Program:
    """What runs, in order, and which tensors come back.

    ``sizes`` names ``main``'s size variables (none for static shapes);
    ``shapes`` maps each tensor name to its shape as TIR expressions.
    """

    inputs: tuple[Input, ...]
    constants: tuple[Constant, ...]
    steps: tuple[KernelCall | Copy, ...]
    outputs: tuple[TensorSpec, ...]
    sizes: tuple[str, ...] = ()
    shapes: dict = attrs.field(factory=dict, eq=False, repr=False)


def _scope(ty: relax.TensorType) -> str:
    vdevice = ty.vdevice
    return str(vdevice.memory_scope) if vdevice is not None else BUFFER_SCOPE


class _Walker:
    def __init__(self):
        self.values: dict[relax.Var, object] = {}
        self.constants: list[Constant] = []
        self.steps: list[KernelCall | Copy] = []
        self.names: dict[str, int] = {}
        self.shapes: dict[str, tuple] = {}
        # Size variable name -> the variable: two variables of one name
        # could not be told apart in the plan's text.
        self.sizes: dict[str, tvm.tirx.Var] = {}

    def _size_variables(self, name: str, dims) -> None:
        def visit(node, visitor):
            if isinstance(node, tvm.ir.Var):
                known = self.sizes.setdefault(str(node.name), node)
                if not known.same_as(node):
                    raise TexscopeError(f"two size variables are named {node.name}; the "
                                        "OpenCL plan needs distinct names", "main", name)
            visitor.default_visit(node)

        for dim in dims:
            tvm_ffi.structural_visit(dim, visit)

    def spec(self, name: str, ty) -> TensorSpec:
        shape = ty.shape if isinstance(ty, relax.TensorType) else None
        if not isinstance(shape, relax.ShapeExpr):
            raise TexscopeError(f"the OpenCL executor needs tensors of known rank and "
                                f"shape expressions, not {ty}", "main", name)
        dims = tuple(shape.values)
        self._size_variables(name, dims)
        self.shapes[name] = dims
        return TensorSpec(name, tuple(size_text(d) for d in dims), str(ty.dtype), _scope(ty))

    def fields(self, name: str, ty) -> tuple[TensorSpec, ...]:
        if isinstance(ty, relax.TupleType):
            return tuple(self.spec(f"{name}.{i}", field) for i, field in enumerate(ty.fields))
        return (self.spec(name, ty),)

    def value(self, expr: relax.Expr, name: str):
        """A TensorSpec, or a tuple of values, for a Relax expression."""
        if isinstance(getattr(expr, "ty", None), tvm.ir.PrimType):
            # A size passed as a value (a TIR expression of size variables).
            return expr
        if isinstance(expr, relax.Var):
            return self.values[expr]
        if isinstance(expr, RelaxConstant):
            spec = self.spec(f"{name}.const{len(self.constants)}", expr.ty)
            self.constants.append(Constant(spec, expr.value.numpy()))
            return spec
        if isinstance(expr, relax.Tuple):
            return tuple(self.value(field, name) for field in expr.fields)
        if isinstance(expr, relax.PrimValue):
            return expr.value
        raise TexscopeError(f"the OpenCL executor does not support {type(expr).__name__} "
                            f"arguments", "main", name)

    def unique_name(self, var: relax.Var) -> str:
        # Relax names repeat (the printer tells them apart as lv, lv_1, ...).
        name, count = var.name, self.names.get(var.name, 0)
        self.names[var.name] = count + 1
        return name if count == 0 else f"{name}_{count}"

    def bind(self, var: relax.Var, expr: relax.Expr) -> None:
        name = self.unique_name(var)
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            op = expr.op.name
            if op == CALL_TIR and len(expr.args) == 2:
                inputs = self.value(expr.args[1], name)
                outputs = self.fields(name, var.ty)
                self.steps.append(KernelCall(name, expr.args[0].name_hint,
                                             (*_flat(inputs), *outputs)))
                self.values[var] = outputs if isinstance(var.ty, relax.TupleType) else outputs[0]
                return
            if op == TO_VDEVICE:
                source, target = self.value(expr.args[0], name), self.spec(name, var.ty)
                self.steps.append(Copy(name, source, target))
                self.values[var] = target
                return
            raise TexscopeError(f"the OpenCL executor does not support {op}", "main", name)
        if isinstance(expr, relax.TupleGetItem):
            self.values[var] = self.value(expr.tuple_value, name)[expr.index]
            return
        if isinstance(expr, (relax.Var, relax.Tuple, RelaxConstant)):
            self.values[var] = self.value(expr, name)
            return
        raise TexscopeError(f"the OpenCL executor does not support {type(expr).__name__}",
                            "main", name)


def _flat(value) -> tuple:
    """Tensors and size values, nested tuples flattened."""
    if isinstance(value, (tuple, list)):
        return tuple(item for field in value for item in _flat(field))
    return (value,)


def read_program(mod: tvm.IRModule) -> Program:
    """The steps of ``mod["main"]`` (a built, scheduled module)."""
    main = mod["main"]
    walker = _Walker()
    inputs = []
    for index, param in enumerate(main.params):
        spec = walker.spec(walker.unique_name(param), param.ty)
        walker.values[param] = spec
        inputs.append(Input(index, spec))
    main_var = mod.get_global_var("main")
    for _, binding in relax_bindings(mod, [main_var]):
        if not isinstance(binding, relax.VarBinding):
            raise TexscopeError("the OpenCL executor does not support match_cast",
                                "main", binding.var.name)
        walker.bind(binding.var, binding.value)
    outputs = _flat(walker.value(main.body.body, "return"))
    return Program(tuple(inputs), tuple(walker.constants), tuple(walker.steps), outputs,
                   tuple(walker.sizes), walker.shapes)
