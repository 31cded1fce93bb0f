"""The tensors of one Relax function and the calls that produce and read them.

Both analyses and the rewrite walk the same :class:`FunctionGraph`, built once
from the function's binding list (A-normal form, no visitor per node).
"""

from __future__ import annotations

import functools
import math

import attrs
import tvm
import tvm_ffi
from tvm import relax

from ..knowledge import registry
from ..errors import TexscopeError
from ..knowledge.registry import OpSupport
from ..knowledge.targets import TextureFit, TextureTarget
# Re-exported: the graph's users have always imported them from here.
from ..knowledge.shapes import static_dims, static_shape  # noqa: F401

# A Relax constant (TVM 0.27's name for it); the one alias the package uses.
Constant = tvm.ir.expr.GenericConst

# Calls in destination-passing style: (callee, (inputs...), ...) -> ty_args[0].
# Operators every module reads the same way, whatever the model.
CALL_TIR = "relax.call_tir"
TO_VDEVICE = "relax.to_vdevice"
# What memory lowering writes: the VM allocates and frees through these.
ALLOC_STORAGE = "relax.memory.alloc_storage"
ALLOC_TENSOR = "relax.memory.alloc_tensor"
KILL_STORAGE = "relax.memory.kill_storage"
KILL_TENSOR = "relax.memory.kill_tensor"
DPS_OPS = frozenset({CALL_TIR, "relax.call_tir_inplace", "relax.call_dps_packed"})

# TVM's attribute counting a function's leading inputs; the parameters after
# them are weights (LiftTransformParams reads it too).
NUM_INPUT = "num_input"
# The origins of tensors the model's weights hold (Tensor.origin).
WEIGHT_ORIGINS = ("constant", "weight")


def inputs_and_weights(func: relax.Function) -> tuple[list[relax.Var], list[relax.Var]]:
    """``func``'s parameters split at ``num_input``: its inputs, then the
    parameters it declares weights (none where it says nothing it can mean)."""
    params = list(func.params)
    count = func.attrs.get(NUM_INPUT) if func.attrs is not None else None
    if count is None or not 0 <= int(count) <= len(params):
        return params, []
    return params[:int(count)], params[int(count):]


def reads_a_weight(arg: relax.Expr, mod: tvm.IRModule, gvar: relax.GlobalVar) -> bool:
    """Whether a call's argument in function ``gvar`` of ``mod`` is one of
    the model's weights: a constant, or a parameter the function declares a
    weight (the :class:`Tensor` origins of :data:`WEIGHT_ORIGINS`)."""
    if isinstance(arg, Constant):
        return True
    return isinstance(arg, relax.Var) and any(arg.same_as(w)
                                              for w in inputs_and_weights(mod[gvar])[1])


@attrs.frozen
class Tensor:
    """One tensor value: a parameter, a constant, or one output of a call.

    Parameters
    ----------
    index : int
        Position in :attr:`FunctionGraph.tensors`.
    name : str
        The variable that holds it (``"lv3[1]"`` for a tuple field).
    origin : str
        ``"param"``, ``"weight"`` (a parameter after the function's
        ``num_input``: :mod:`texscope.rewrites.lift_weights`), ``"call"`` or
        ``"constant"``.
    shape : tuple of int or None
        The static shape, None when any dimension is symbolic.
    dtype : str
        Element type.
    fit : TextureFit
        Whether and how it fits a texture on the target.
    """

    index: int
    name: str
    origin: str
    shape: tuple[int, ...] | None
    dtype: str
    fit: TextureFit

    @property
    def nbytes(self) -> int:
        """Size in bytes, 0 when the shape is symbolic."""
        return 0 if self.shape is None else nbytes(self.shape, self.dtype)

    @property
    def is_weight(self) -> bool:
        """Whether the model's weights hold it: a constant, or a parameter
        the function declares a weight."""
        return self.origin in WEIGHT_ORIGINS


@attrs.frozen
class CallSite:
    """One call binding, with the tensors it reads and writes.

    Parameters
    ----------
    index : int
        Position in :attr:`FunctionGraph.calls` (binding order).
    name : str
        The variable the call is bound to.
    support : OpSupport
        The registry entry describing the kernel.
    operands : tuple of (int or None)
        Per kernel input, the tensor read, None where the input is no tensor.
    outputs : tuple of int
        The tensors written, one per output field.
    """

    index: int
    name: str
    support: OpSupport
    operands: tuple[int | None, ...]
    outputs: tuple[int, ...]


@attrs.frozen
class FunctionGraph:
    """The dataflow of one Relax function, in binding order.

    Parameters
    ----------
    function : str
        The function's global name.
    tensors : tuple of Tensor
        Every tensor value.
    calls : tuple of CallSite
        Every call binding, in order.
    returned : tuple of int
        Tensors the function returns.
    params : tuple
        Per parameter, its tensor index (a tuple of them for a tuple
        parameter, None for a non-tensor).
    constants : dict
        Tensor index of each constant the function reads.
    """

    function: str
    tensors: tuple[Tensor, ...]
    calls: tuple[CallSite, ...]
    returned: tuple[int, ...]
    params: tuple[object, ...] = ()
    constants: dict = attrs.field(factory=dict, eq=False)
    texture: TextureTarget | None = attrs.field(default=None, eq=False)
    producers: dict = attrs.field(factory=dict, eq=False)

    def producer(self, tensor: int) -> tuple[CallSite, int]:
        """The call writing a tensor, and which of its outputs it is."""
        return self.producers[tensor]

    def tensor(self, name: str) -> Tensor:
        """The tensor held by a variable (``"lv3[1]"`` for a tuple field)."""
        for tensor in self.tensors:
            if tensor.name == name:
                return tensor
        raise KeyError(name)


def tensor_types(ty):
    """The tensor types of a type, through nested tuples, in order."""
    if isinstance(ty, relax.TensorType):
        yield ty
    elif isinstance(ty, relax.TupleType):
        for field in ty.fields[:]:
            yield from tensor_types(field)


def handle(obj) -> int:
    """An IR object's identity, to key a dict by.  A variable read from the
    IR is a new Python object each time, which a dict keyed by the objects
    compares with its key through TVM's ``__eq__`` (2.4 us a lookup against
    0.1 by handle)."""
    return obj.__chandle__()


# relax.Call's Python constructor imports three modules and normalises its
# arguments on every call before it calls this one (10 us a call against 2).
_new_call = tvm.ir._ffi_api.Call  # pylint: disable=protected-access
_NO_TYPE_YET = tvm.ir.Type.missing()


def new_call(op, args, attrs=None, ty_args=(), span=None, ty=None) -> relax.Call:
    """``relax.Call(op, args, attrs, ty_args, span, ret_ty=ty)`` for an ``op``
    that is an expression (not a name) and a ``ty`` that is a type or None
    (untyped until normalized)."""
    return _new_call(_NO_TYPE_YET if ty is None else ty, op, list(args), attrs, list(ty_args),
                     span)


_new_tensor_type = relax._ffi_api.TensorType  # pylint: disable=protected-access


def new_tensor_type(shape, dtype, vdevice=None, ndim: int = -1) -> relax.TensorType:
    """``relax.TensorType(shape, dtype, vdevice, ndim)`` for a ``shape`` that is
    an expression or None and a ``dtype`` that is a type (as a TensorType's
    own fields are), by TVM's constructor function (1 us against 5)."""
    return _new_tensor_type(shape, dtype, ndim, vdevice, None)


def known_ndim(ty) -> int | None:
    """The rank of a tensor type; None for an unknown rank or a non-tensor."""
    return ty.ndim if isinstance(ty, relax.TensorType) and ty.ndim >= 0 else None


@functools.lru_cache(maxsize=None)
def element_bits(dtype: str) -> int:
    """Bits of one element of ``dtype``, its lanes included (parsed by TVM
    once per dtype: a model has hundreds of tensors of a few)."""
    parsed = tvm.DataType(dtype)
    return parsed.bits * parsed.lanes


def nbytes(shape, dtype) -> int:
    """Bytes of a tensor of a static ``shape`` and ``dtype``."""
    return math.prod(shape) * element_bits(str(dtype)) // 8


def static_bytes(ty) -> int:
    """Bytes of the tensors of a type (through tuples); a tensor of symbolic
    or unknown shape counts 0."""
    return sum(nbytes(shape, tensor.dtype) for tensor in tensor_types(ty)
               if (shape := static_shape(tensor)) is not None)


def dps_inputs(call: relax.Call) -> list[relax.Expr]:
    """The kernel inputs of a call: the packed tuple of a DPS call, else its args."""
    if isinstance(call.op, tvm.ir.Op) and call.op.name in DPS_OPS:
        return call.args[1].fields[:]
    return call.args[:]


class _Builder:
    def __init__(self, mod: tvm.IRModule, gvar: relax.GlobalVar, texture: TextureTarget):
        self.mod = mod
        self.function = gvar.name_hint
        self.texture = texture
        self.tensors: list[Tensor] = []
        self.calls: list[CallSite] = []
        # Var -> tensor index, or a tuple (nested) of those for tuple values.
        self.value_of: dict[relax.Var, object] = {}
        self.constant_of: dict[Constant, int] = {}
        # A call_tir's entry depends on its PrimFunc only.
        self.support_of_callee: dict[relax.GlobalVar, OpSupport] = {}

    def new_tensor(self, name: str, origin: str, ty: relax.TensorType) -> int:
        shape = static_shape(ty)
        dtype = str(ty.dtype)
        index = len(self.tensors)
        fit = self.texture.fit(shape, dtype, weight=origin in WEIGHT_ORIGINS)
        self.tensors.append(Tensor(index, name, origin, shape, dtype, fit))
        return index

    def tensors_of_type(self, name: str, origin: str, ty) -> object:
        if isinstance(ty, relax.TensorType):
            return self.new_tensor(name, origin, ty)
        if isinstance(ty, relax.TupleType):
            return tuple(
                self.tensors_of_type(f"{name}[{i}]", origin, field)
                for i, field in enumerate(ty.fields[:])
            )
        return None

    def resolve(self, expr: relax.Expr, binding: str) -> object:
        if isinstance(expr, relax.Var):
            return self.value_of.get(expr)
        if isinstance(expr, Constant):
            if expr not in self.constant_of:
                self.constant_of[expr] = self.new_tensor(
                    f"const{len(self.constant_of)}", "constant", expr.ty
                )
            return self.constant_of[expr]
        if isinstance(expr, relax.Tuple):
            return tuple(self.resolve(field, binding) for field in expr.fields[:])
        if isinstance(expr, relax.TupleGetItem):
            whole = self.resolve(expr.tuple_value, binding)
            return whole[expr.index] if isinstance(whole, tuple) else None
        if isinstance(expr, (relax.If, relax.Function, relax.SeqExpr)):
            raise TexscopeError(
                f"{type(expr).__name__} values are not supported; texscope annotates "
                "straight-line dataflow",
                self.function,
                binding,
            )
        return None

    def add_call(self, var: relax.Var, call: relax.Call) -> None:
        name = var.name
        if isinstance(call.op, tvm.ir.Op) and call.op.name == CALL_TIR:
            callee = call.args[0]
            if callee not in self.support_of_callee:
                self.support_of_callee[callee] = registry.support_for(call, self.mod)
            support = self.support_of_callee[callee]
        else:
            support = registry.support_for(call, self.mod)
        operands = []
        for arg in dps_inputs(call):
            value = self.resolve(arg, name)
            operands.append(value if isinstance(value, int) else None)
        produced = self.tensors_of_type(name, "call", var.ty)
        self.value_of[var] = produced
        outputs = produced if isinstance(produced, tuple) else (produced,)
        if not all(isinstance(o, int) for o in outputs):
            outputs = ()  # nested tuples and non-tensor results stay as they are
        self.calls.append(CallSite(len(self.calls), name, support, tuple(operands), outputs))

    def build(self, func: relax.Function) -> FunctionGraph:
        params = []
        inputs, _ = inputs_and_weights(func)
        for position, param in enumerate(func.params):
            origin = "param" if position < len(inputs) else "weight"
            params.append(self.tensors_of_type(param.name, origin, param.ty))
            self.value_of[param] = params[-1]
        for block in func.body.blocks[:]:
            in_dataflow = isinstance(block, relax.DataflowBlock)
            for binding in block.bindings[:]:
                var, value = binding.var, binding.value
                if isinstance(value, relax.Call):
                    if not in_dataflow:
                        raise TexscopeError(
                            "call outside a dataflow block; wrap the function body in "
                            "R.dataflow() (relax.transform.ConvertToDataflow)",
                            self.function,
                            var.name,
                        )
                    self.add_call(var, value)
                else:
                    self.value_of[var] = self.resolve(value, var.name)
        returned = self.resolve(func.body.body, "return")
        return FunctionGraph(
            function=self.function,
            tensors=tuple(self.tensors),
            calls=tuple(self.calls),
            returned=tuple(_flatten(returned)),
            params=tuple(params),
            constants=dict(self.constant_of),
            texture=self.texture,
            producers={t: (site, field) for site in self.calls for field, t in enumerate(site.outputs)},
        )


def _flatten(value: object):
    if isinstance(value, int):
        yield value
    elif isinstance(value, tuple):
        for field in value:
            yield from _flatten(field)


def build_graph(mod: tvm.IRModule, gvar: relax.GlobalVar, texture: TextureTarget) -> FunctionGraph:
    """Build the dataflow graph of one Relax function."""
    return _Builder(mod, gvar, texture).build(mod[gvar])


def vars_read(expr) -> list:
    """The Relax variables ``expr`` reads."""
    found: list = []
    _collect_vars_read(expr, found)
    return found


def read_after_block(func: relax.Function, block_index: int) -> set[int]:
    """The :func:`handle` of every variable read after block ``block_index``
    of ``func`` (by a later block or the function's result)."""
    read = {handle(var) for var in vars_read(func.body.body)}
    for block in func.body.blocks[block_index + 1:]:
        for binding in block.bindings[:]:
            read.update(handle(var) for var in vars_read(binding.value))
    return read


def _collect_vars_read(expr, found: list) -> None:
    if isinstance(expr, relax.Var):
        found.append(expr)
    elif isinstance(expr, relax.Call):
        if not isinstance(expr.op, tvm.ir.Op):  # a local function's variable
            _collect_vars_read(expr.op, found)
        for arg in expr.args[:]:
            _collect_vars_read(arg, found)
    elif isinstance(expr, relax.Tuple):
        for field in expr.fields[:]:
            _collect_vars_read(field, found)
    elif isinstance(expr, relax.TupleGetItem):
        _collect_vars_read(expr.tuple_value, found)
    elif isinstance(expr, (relax.If, relax.SeqExpr, relax.Function)):
        found.extend(relax.analysis.free_vars(expr))
    # else: constants, shapes, sizes, strings, functions named globally


def relax_bindings(mod: tvm.IRModule, functions=None):
    """Every binding of every Relax function (or of the GlobalVars in
    ``functions``), as (function's GlobalVar, binding), in program order."""
    for gvar in mod.functions if functions is None else functions:
        func = mod[gvar]
        if isinstance(func, relax.Function):
            for block in func.body.blocks[:]:
                for binding in block.bindings[:]:
                    yield gvar, binding


def require_shapes(mod: tvm.IRModule) -> None:
    """Raise unless every tensor a call reads or writes has a known shape.

    (A shape-less tensor may exist, e.g. as the input of ``R.match_cast``.)
    """
    for gvar, binding in relax_bindings(mod):
        if not isinstance(binding.value, relax.Call):
            continue
        for expr in [*dps_inputs(binding.value), binding.var]:
            ty = expr.ty
            if isinstance(ty, relax.TensorType) and not isinstance(ty.shape, relax.ShapeExpr):
                name = expr.name if isinstance(expr, relax.Var) else binding.var.name
                raise TexscopeError(
                    "tensor has no known shape; texscope needs shapes (run the "
                    "frontend with shapes, or R.match_cast to a shape)",
                    gvar.name_hint,
                    name,
                )


def annotated_functions(mod: tvm.IRModule) -> list[relax.GlobalVar]:
    """The Relax functions texscope annotates: all but fused primitive ones."""
    return sorted(
        (
            gvar
            for gvar, func in mod.functions.items()
            if isinstance(func, relax.Function)
            and not (func.attrs and int(func.attrs.get("Primitive", 0)))
        ),
        key=lambda g: g.name_hint,
    )


def redirect_calls(func: relax.Function, callees: dict) -> relax.Function:
    """``func`` calling ``callees[g]`` wherever it called a GlobalVar ``g``
    that ``callees`` maps.  For callees of the same type (a twin kernel, a
    kernel renamed): no binding is retyped."""
    return tvm_ffi.structural_map(func, (tvm.ir.GlobalVar, lambda gvar: callees.get(gvar, gvar)))
