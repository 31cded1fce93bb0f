"""The call sequence of a built model, read off its Relax ``main``.

Each tensor keeps the memory scope its Relax type carries (the VDevice the
texture pipeline wrote), so the executor allocates what the program says, not
what the planner meant: where the two disagree, the run fails or its numbers
do.
"""

from __future__ import annotations

import attrs
import numpy as np
import tvm
from tvm import relax

from ..errors import TexscopeError
from ..ir.graph import Constant as RelaxConstant, static_shape
from ..knowledge.scopes import BUFFER_SCOPE
from .plan import TensorSpec


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
    """``call_tir``: a host function run on its inputs, then its outputs."""

    binding: str
    function: str
    tensors: tuple[TensorSpec, ...]


@attrs.frozen
class Copy:
    """``to_vdevice``: the same values moved into another storage."""

    binding: str
    source: TensorSpec
    target: TensorSpec


@attrs.frozen
class Program:
    """What runs, in order, and which tensors come back."""

    inputs: tuple[Input, ...]
    constants: tuple[Constant, ...]
    steps: tuple[KernelCall | Copy, ...]
    outputs: tuple[TensorSpec, ...]


def _scope(ty: relax.TensorType) -> str:
    vdevice = ty.vdevice
    return str(vdevice.memory_scope) if vdevice is not None else BUFFER_SCOPE


def _spec(name: str, ty) -> TensorSpec:
    shape = static_shape(ty) if isinstance(ty, relax.TensorType) else None
    if shape is None:
        raise TexscopeError(f"the OpenCL executor needs tensors with static shapes, not {ty}",
                            "main", name)
    return TensorSpec(name, shape, str(ty.dtype), _scope(ty))


def _fields(name: str, ty) -> tuple[TensorSpec, ...]:
    if isinstance(ty, relax.TupleType):
        return tuple(_spec(f"{name}.{i}", field) for i, field in enumerate(ty.fields))
    return (_spec(name, ty),)


class _Walker:
    def __init__(self):
        self.values: dict[relax.Var, object] = {}
        self.constants: list[Constant] = []
        self.steps: list[KernelCall | Copy] = []
        self.names: dict[str, int] = {}

    def value(self, expr: relax.Expr, name: str):
        """A TensorSpec, or a tuple of values, for a Relax expression."""
        if isinstance(expr, relax.Var):
            return self.values[expr]
        if isinstance(expr, RelaxConstant):
            spec = _spec(f"{name}.const{len(self.constants)}", expr.ty)
            self.constants.append(Constant(spec, expr.value.numpy()))
            return spec
        if isinstance(expr, relax.Tuple):
            return tuple(self.value(field, name) for field in expr.fields)
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
            if op == "relax.call_tir" and len(expr.args) == 2:
                inputs = self.value(expr.args[1], name)
                outputs = _fields(name, var.ty)
                self.steps.append(KernelCall(name, expr.args[0].name_hint,
                                             (*_flat(inputs), *outputs)))
                self.values[var] = outputs if isinstance(var.ty, relax.TupleType) else outputs[0]
                return
            if op == "relax.to_vdevice":
                source, target = self.value(expr.args[0], name), _spec(name, var.ty)
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


def _flat(value) -> tuple[TensorSpec, ...]:
    if isinstance(value, TensorSpec):
        return (value,)
    return tuple(spec for field in value for spec in _flat(field))


def read_program(mod: tvm.IRModule) -> Program:
    """The steps of ``mod["main"]`` (a built, scheduled module)."""
    main = mod["main"]
    walker = _Walker()
    inputs = []
    for index, param in enumerate(main.params):
        spec = _spec(walker.unique_name(param), param.ty)
        walker.values[param] = spec
        inputs.append(Input(index, spec))
    body = main.body
    for block in body.blocks:
        for binding in block.bindings:
            if not isinstance(binding, relax.VarBinding):
                raise TexscopeError("the OpenCL executor does not support match_cast",
                                    "main", binding.var.name)
            walker.bind(binding.var, binding.value)
    outputs = _flat(walker.value(body.body, "return"))
    return Program(tuple(inputs), tuple(walker.constants), tuple(walker.steps), outputs)
