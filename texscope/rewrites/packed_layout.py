"""Stage 1's layout conversion: what TVM's ``ConvertLayout`` makes of a module,
computed in Python for the operators whose layout rule the registry gives.

TVM's pass builds layout objects (26 IterVars each), an arithmetic analyzer
and a JSON round trip of an index map for every binding it touches: several
hundred microseconds a binding, most of stage 1 on a real model.  The layouts
stage 1 asks for are few (plain, or a plain layout with one channel split
into whole texels), so they are kept here as TVM names them (``ABCD``,
``ABCD4b``) and each rule is a few string operations.

:func:`convert_layout` returns exactly the module TVM's pass returns: any
operator without a rule (:data:`texscope.knowledge.registry.LAYOUT_RULES`),
any layout or binding outside what the rules describe, sends the whole
module to TVM's pass instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import tvm
import tvm_ffi
from tvm import relax

from ..knowledge import registry

_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_CONSTANT = tvm.ir.expr.GenericConst
# A layout is TVM's name of a LayoutDecision ("ABCD", "ABCD4b", "" for a
# scalar), None for a value of unknown rank (not a tensor), or a tuple of
# those for a tuple.
Layout = "str | None | tuple"


class Unsupported(Exception):
    """Raised where the module leaves what the rules describe; the caller
    then runs TVM's pass on the whole module."""


def _initial(ndim: int) -> str:
    if not 0 <= ndim <= 26:
        raise Unsupported(f"rank {ndim}")
    return _LETTERS[:ndim]


def _axes(layout: str) -> list[str]:
    """The axes of a layout name: ``"ABCD4b"`` -> ``["A", "B", "C", "D", "4b"]``."""
    axes, factor = [], ""
    for char in layout:
        if char.isdigit():
            factor += char
        elif char.isupper() and not factor:
            axes.append(char)
        elif char.islower() and factor:
            axes.append(factor + char)
            factor = ""
        else:
            raise Unsupported(f"layout {layout}")
    if factor:
        raise Unsupported(f"layout {layout}")
    return axes


def _ndim(layout: str) -> int:
    return len(_axes(layout))


def _packed(layout: str) -> bool:
    return any(not char.isupper() for char in layout)


def _split_factors(layout: str) -> dict[str, int]:
    """Each split primal axis of a layout and the factor of its subordinate."""
    factors: dict[str, int] = {}
    for axis in _axes(layout):
        if len(axis) > 1:
            primal = axis[-1].upper()
            if primal in factors or primal not in layout:
                raise Unsupported(f"layout {layout}")
            factors[primal] = int(axis[:-1])
    return factors


def _can_prove_transform(src: str, dst: str, shape: Sequence) -> bool:
    """TVM's CanProveLayoutTransform for a plain ``src``: every constant
    extent survives ``dst`` and back (a split axis is a multiple of its factor)."""
    primal = [c for c in dst if c.isupper()]
    if (_packed(src) or len(set(src)) != len(src) or len(primal) != len(set(primal))
            or sorted(primal) != sorted(src) or len(shape) != len(src)):
        raise Unsupported(f"transform {src} -> {dst}")
    factors = _split_factors(dst)
    for axis, extent in zip(src, shape):
        if not isinstance(extent, tvm.tirx.IntImm):
            raise Unsupported("symbolic extent")
        if axis in factors and extent.value % factors[axis]:
            return False
    return True


def _transpose_sub_layout(ref: str, src: str, desired: str) -> str:
    """TVM's TransposeSubLayoutStrLike: ``desired`` written in ``ref``'s letters
    where ``src`` names them."""
    out = []
    for char in desired:
        if char.isdigit():
            out.append(char)
            continue
        where = src.find(char.upper())
        if where < 0:
            raise Unsupported(f"{char} not in {src}")
        out.append(ref[where] if char.isupper() else ref[where].lower())
    return "".join(out)


def _tensor_ndim(ty) -> int | None:
    if isinstance(ty, relax.TensorType):
        return None if ty.ndim == -1 else ty.ndim
    return None


def _initial_of_type(ty) -> Layout:
    if isinstance(ty, relax.TensorType):
        if ty.ndim == -1:
            raise Unsupported("tensor of unknown rank")
        return _initial(ty.ndim)
    if isinstance(ty, relax.TupleType):
        return tuple(_initial_of_type(field) for field in ty.fields)
    return None


def _static_shape(expr: relax.Expr) -> list:
    return _static_shape_of(expr.ty)


def _static_shape_of(ty) -> list:
    shape = ty.shape if isinstance(ty, relax.TensorType) else None
    if not isinstance(shape, relax.ShapeExpr):
        raise Unsupported("no static shape")
    return list(shape.values)


_INDEX_MAPS: dict[tuple[str, str], str] = {}


def _index_map(src: str, dst: str) -> tvm.tirx.IndexMap:
    """The index map TVM's pass writes into a layout transform from ``src`` to
    ``dst``: a fresh object each time, as TVM's (a JSON round trip of one
    built once per pair; a shared one would not be structurally equal)."""
    key = (src, dst)
    if key not in _INDEX_MAPS:
        indices = [tvm.tirx.Var(f"i{i}", "int32") for i in range(_ndim(src))]
        final = tvm.s_tir.sbijective_layout(src, dst).forward_index(indices)
        _INDEX_MAPS[key] = tvm_ffi.serialization.to_json_graph_str(
            tvm.tirx.IndexMap(indices, final, None))
    return tvm_ffi.serialization.from_json_graph_str(_INDEX_MAPS[key])


def _int_extents(shape: Sequence) -> list[int]:
    if not all(isinstance(extent, tvm.tirx.IntImm) for extent in shape):
        raise Unsupported("symbolic extent")
    return [extent.value for extent in shape]


def _converted_shape(src: str, dst: str, shape: Sequence) -> list[int]:
    """The shape of a tensor of ``shape`` in layout ``src`` once in ``dst``,
    one of them plain and both of the same axes, every split extent a
    multiple of its factor (what TVM infers for the transform otherwise
    depends on how its analyzer bounds the index map)."""
    extents = _int_extents(shape)
    if _packed(src):
        if _packed(dst) or sorted(c for c in src if c.isupper()) != sorted(dst):
            raise Unsupported(f"transform {src} -> {dst}")
        factors = _split_factors(src)
        axes = _axes(src)
        return [extents[axes.index(axis)] * factors.get(axis, 1) for axis in dst]
    if sorted(c for c in dst if c.isupper()) != sorted(src):
        raise Unsupported(f"transform {src} -> {dst}")
    factors = _split_factors(dst)
    out = []
    for axis in _axes(dst):
        if len(axis) > 1:
            out.append(int(axis[:-1]))
        else:
            factor = factors.get(axis, 1)
            extent = extents[src.index(axis)]
            if extent % factor:
                raise Unsupported(f"extent {extent} split by {factor}")
            out.append(extent // factor)
    return out


def _typed_like(ty: relax.TensorType, shape: list[int]) -> relax.TensorType:
    return relax.TensorType(shape, ty.dtype, ty.vdevice)


def _with_fields(attrs_obj, **changes):
    info = type(attrs_obj).__tvm_ffi_type_info__
    values = {f.name: getattr(attrs_obj, f.name) for f in info.fields}
    values.update(changes)
    return tvm.ir.make_node(info.type_key, **values)


_HAS_INFER_LAYOUT: dict[str, bool] = {}


def _has_infer_layout(op: tvm.ir.Op) -> bool:
    name = op.name
    if name not in _HAS_INFER_LAYOUT:
        _HAS_INFER_LAYOUT[name] = op.get_attr("FRelaxInferLayout") is not None
    return _HAS_INFER_LAYOUT[name]


class _Inferred:
    """One call's layouts: per tensor operand, of the output; new attributes
    and replaced operands."""

    __slots__ = ("inputs", "output", "attrs", "new_args", "ty")

    def __init__(self, inputs, output, attrs_obj, new_args=None, ty=None):
        self.inputs = inputs
        self.output = output
        self.attrs = attrs_obj
        self.new_args = new_args or {}
        # The result type where the rule knows it: type inference of a
        # packed conv or pool builds TVM layout objects (most of their cost).
        self.ty = ty


class _BlockConverter:
    """One dataflow block through the rules, as TVM's LayoutConvertMutator
    walks it (one BlockBuilder per block)."""

    def __init__(self, layout_cb: Callable[[relax.Call], Mapping]):
        self.layout_cb = layout_cb
        self.layouts: dict[relax.Var, Layout] = {}
        self.remap: dict[relax.Var, relax.Var] = {}
        self.bb = relax.BlockBuilder()

    # -- layouts of expressions ------------------------------------------
    def layout_of(self, expr: relax.Expr) -> Layout:
        if isinstance(expr, relax.Var):
            found = self.layouts.get(expr)
            return found if found is not None or expr in self.layouts else _initial_of_type(expr.ty)
        if isinstance(expr, _CONSTANT):
            return _initial(expr.ty.ndim)
        if isinstance(expr, relax.Tuple):
            return tuple(self.layout_of(field) for field in expr.fields)
        return None

    def replace(self, expr: relax.Expr) -> relax.Expr:
        if isinstance(expr, relax.Var):
            return self.remap.get(expr, expr)
        if isinstance(expr, relax.Tuple):
            fields = [self.replace(f) for f in expr.fields]
            if any(not new.same_as(old) for new, old in zip(fields, expr.fields)):
                return relax.Tuple(fields, expr.span)
        return expr

    def rewrite(self, expr: relax.Expr, to: Layout) -> relax.Expr:
        """``expr`` (variables renamed) in layout ``to``: unchanged, or wrapped
        in a layout transform that the enclosing normalization binds."""
        if isinstance(expr, relax.Tuple) and isinstance(to, tuple) and len(to) == len(expr.fields):
            fields = [self.rewrite(field, layout) for field, layout in zip(expr.fields, to)]
            if all(new.same_as(old) for new, old in zip(fields, expr.fields)):
                return expr
            return relax.Tuple(fields, expr.span)
        new = self.replace(expr)
        source = self.layout_of(expr)
        if source == to or source == "":
            return new
        if isinstance(source, tuple) or isinstance(to, tuple) or source is None or to is None:
            raise Unsupported("conversion of a tuple or of an unknown rank")
        if _ndim(source) == _ndim(to):
            raise Unsupported("permutation")
        ty = new.ty
        if not isinstance(ty, relax.TensorType) or ty.shape is None:
            raise Unsupported("transform of a tensor without shape")
        # Typed here: its type inference builds TVM layout objects again.
        template = relax.op.layout_transform(new, _index_map(source, to))
        return relax.Call(template.op, template.args, template.attrs, template.ty_args,
                          ret_ty=_typed_like(ty, _converted_shape(source, to, ty.shape.values)))

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
            self.remap[var] = new_var
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
        for binding in block.bindings:
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
                self.reemit(binding, self.bb.normalize(self.rewrite(value, _initial_of_type(value.ty))))
            elif isinstance(value, (relax.If, relax.Function, relax.SeqExpr)):
                raise Unsupported(type(value).__name__)
            else:  # a constant or another leaf: left as it is
                self.reemit(binding, value)
            self.layouts.setdefault(binding.var, _initial_of_type(binding.var.ty))

    def visit_tuple(self, binding, value: relax.Tuple) -> None:
        dataflow = isinstance(binding.var, relax.DataflowVar)
        layouts = [self.layout_of(f) if dataflow else _initial_of_type(f.ty) for f in value.fields]
        if not _nested_tensor(binding.var.ty):
            raise Unsupported("tuple binding of non-tensors")
        fields = self.rewrite_args(value.fields, layouts)
        self.reemit(binding, self.bb.normalize(relax.Tuple(fields)))
        self.layouts[binding.var] = tuple(layouts)

    def visit_get_item(self, binding, value: relax.TupleGetItem) -> None:
        layout = (self.layout_of(value.tuple_value) if isinstance(binding.var, relax.DataflowVar)
                  else _initial_of_type(value.tuple_value.ty))
        if not isinstance(layout, tuple):
            raise Unsupported("item of a non-tuple layout")
        item = relax.TupleGetItem(self.rewrite(value.tuple_value, layout), value.index)
        self.reemit(binding, self.bb.normalize(item))
        self.layouts[binding.var] = layout[value.index]

    def visit_call(self, binding, call: relax.Call) -> None:
        inferred = None
        if isinstance(call.op, tvm.ir.Op):
            if any(isinstance(a.ty, relax.TensorType) and a.ty.ndim == -1 for a in call.args):
                raise Unsupported("operand of unknown rank")
            if _has_infer_layout(call.op):
                inferred = self.infer(call)
        elif not isinstance(call.op, (relax.ExternFunc, tvm.ir.GlobalVar)):
            raise Unsupported("call of a local function")
        var = binding.var
        dataflow = isinstance(var, relax.DataflowVar)
        if inferred is None or (not _nested_tensor(var.ty) and not dataflow):
            args = self.rewrite_args(call.args, [_initial_of_type(a.ty) for a in call.args])
            new_call = relax.Call(call.op, args, call.attrs, call.ty_args, call.span)
            self.reemit(binding, self.bb.normalize(new_call))
            self.layouts[var] = _initial_of_type(var.ty)
            return
        args = self.rewrite_args(call.args, inferred.inputs)
        for index, arg in inferred.new_args.items():
            args[index] = arg
        value = self.bb.normalize(relax.Call(call.op, args, inferred.attrs, call.ty_args, call.span,
                                             ret_ty=inferred.ty))
        if dataflow:
            self.reemit(binding, value)
            self.layouts[var] = inferred.output
            return
        initial = _initial_of_type(var.ty)
        if inferred.output != initial:
            packed = self.bb.emit(value)
            self.layouts[packed] = inferred.output
            value = self.bb.normalize(self.rewrite(packed, initial))
        self.reemit(binding, value)
        self.layouts[var] = initial

    # -- the rules -----------------------------------------------------------
    def infer(self, call: relax.Call) -> _Inferred:
        rule = registry.LAYOUT_RULES.get(call.op.name)
        if rule is None:
            raise Unsupported(f"no layout rule for {call.op.name}")
        return getattr(self, "_rule_" + rule.kind)(call, rule)

    def _leaf(self, expr) -> str:
        layout = self.layout_of(expr)
        if not isinstance(layout, str):
            raise Unsupported("operand not a tensor")
        return layout

    def _no_desired(self, call) -> None:
        if call.op.name in self.layout_cb(call):
            raise Unsupported("desired layouts for an operator that follows its input")

    def _rule_elementwise(self, call, _rule) -> _Inferred:
        self._no_desired(call)
        layout = self._leaf(call.args[0])
        return _Inferred([layout], layout, call.attrs)

    def _rule_broadcast(self, call, _rule) -> _Inferred:
        self._no_desired(call)
        first, second = self._leaf(call.args[0]), self._leaf(call.args[1])
        ndim1, ndim2 = _tensor_ndim(call.args[0].ty), _tensor_ndim(call.args[1].ty)
        if ndim1 is None or ndim2 is None:
            raise Unsupported("broadcast of non-tensors")
        if _packed(first) or _packed(second):
            if _primal(first) == _primal(second):
                if _ndim(first) >= _ndim(second):
                    shape = _static_shape(call.args[1])
                    if _can_prove_transform(_initial(len(shape)), first, shape):
                        return _Inferred([first, first], first, call.attrs)
                else:
                    shape = _static_shape(call.args[0])
                    if _can_prove_transform(_initial(len(shape)), second, shape):
                        return _Inferred([second, second], second, call.attrs)
        if ndim1 <= ndim2:
            if ndim1 == 0:
                return _Inferred(["", second], second, call.attrs)
            out = _follow(first, ndim2)
            return _Inferred([first, out], out, call.attrs)
        if ndim2 == 0:
            return _Inferred([first, ""], first, call.attrs)
        out = _follow(second, ndim1)
        return _Inferred([out, second], out, call.attrs)

    def _rule_desired(self, call, rule) -> _Inferred:
        data, weight = self._leaf(call.args[0]), self._leaf(call.args[1])
        names = rule.layout_attrs
        own = [str(getattr(call.attrs, name)) for name in names]
        desired = self.layout_cb(call).get(call.op.name)
        if desired is not None:
            desired = [str(d) for d in desired]
            if len(desired) == 2:
                desired.append(desired[0])
            if any(_ndim(d) == _ndim(o) for d, o in zip(desired, own)):
                raise Unsupported("desired layout of the same rank")
            if (_can_prove_transform(own[0], desired[0], _static_shape(call.args[0]))
                    and _can_prove_transform(own[1], desired[1], _static_shape(call.args[1]))):
                data, weight, out = (_transpose_sub_layout("ABCD", o, d)
                                     for o, d in zip(own, desired))
                new_attrs = _with_fields(call.attrs, **dict(zip(names, desired)))
                return _Inferred([data, weight], out, new_attrs,
                                 ty=_packed_type(call, own[2], desired[2]))
            data = weight = _initial(4)
        if data != _initial(4) or weight != _initial(4):
            raise Unsupported("operand in a layout the operator would follow")
        return _Inferred([data, weight], data, _with_fields(call.attrs))

    def _rule_window(self, call, rule) -> _Inferred:
        self._no_desired(call)
        if _tensor_ndim(call.ty) != 4:
            raise Unsupported("window operator not 4-D")
        layout = self._leaf(call.args[0])
        names = rule.layout_attrs
        own = str(getattr(call.attrs, names[0]))
        if _packed(layout):
            desired = _transpose_sub_layout(own, "ABCD", layout)
            if _can_prove_transform(own, desired, _static_shape(call.args[0])):
                return _Inferred([layout], layout,
                                 _with_fields(call.attrs, **{name: desired for name in names}),
                                 ty=_packed_type(call, own, desired))
            layout = _initial(4)
        if layout != _initial(4):
            raise Unsupported("permuted layout")
        return _Inferred([layout], layout, _with_fields(call.attrs))

    def _rule_plain(self, call, rule) -> _Inferred:
        self._no_desired(call)
        ndim = _tensor_ndim(call.args[0].ty)
        layout = self._leaf(call.args[0])
        if ndim is None or _tensor_ndim(call.ty) is None:
            raise Unsupported("operand of unknown rank")
        if _packed(layout):
            layout = _initial(ndim)
        if layout != _initial(ndim):
            raise Unsupported("permuted layout")
        new_args, new_attrs = {}, call.attrs
        if rule.axis_attr:
            axis = int(getattr(call.attrs, rule.axis_attr))
            new_attrs = _with_fields(call.attrs, **{rule.axis_attr: (axis + ndim) % ndim})
        if rule.axes_operand is not None:
            axes = call.args[rule.axes_operand]
            if not isinstance(axes, relax.Tuple) or not all(
                    isinstance(a, tvm.tirx.IntImm) for a in axes.fields):
                raise Unsupported("axes not static")
            new_args[rule.axes_operand] = relax.Tuple(
                [tvm.tirx.IntImm("int64", (a.value + ndim) % ndim) for a in axes.fields])
        return _Inferred([layout], _initial(_tensor_ndim(call.ty)), new_attrs, new_args)

    def _rule_permute(self, call, rule) -> _Inferred:
        """A packed input unpacked; the order written out (reversed where None)."""
        self._no_desired(call)
        ndim = _tensor_ndim(call.args[0].ty)
        if ndim is None:
            raise Unsupported("operand of unknown rank")
        layout = self._leaf(call.args[0])
        if _packed(layout):
            layout = _initial(ndim)
        if layout != _initial(ndim):
            raise Unsupported("permuted layout")
        order = getattr(call.attrs, rule.axis_attr)
        order = list(range(ndim - 1, -1, -1)) if order is None else [int(a) for a in order]
        if sorted(order) != list(range(ndim)):
            raise Unsupported("axes not a permutation of non-negative axes")
        return _Inferred([layout], layout, _with_fields(call.attrs, **{rule.axis_attr: order}))

    def _rule_join(self, call, rule) -> _Inferred:
        """TVM's InferLayoutConcat: all operands in the first packed one's
        layout where none is plain, else in the first plain one's."""
        self._no_desired(call)
        layouts = self.layout_of(call.args[0])
        if not isinstance(layouts, tuple) or not all(isinstance(l, str) for l in layouts):
            raise Unsupported("join of a non-tuple")
        fields = call.args[0].ty.fields
        layout = layouts[0]
        first_packed = next((i for i, l in enumerate(layouts) if _packed(l)), None)
        if first_packed is not None:
            # TVM proves each operand up to the packed one packs as it does
            # (it cannot for the packed one itself) and needs their shapes.
            for field in fields[:first_packed + 1]:
                if not isinstance(field, relax.TensorType) or not isinstance(
                        field.shape, relax.ShapeExpr):
                    raise Unsupported("operand without a static shape")
            plain = [l for l in layouts if not _packed(l)]
            layout = plain[0] if plain else layouts[first_packed]
        axis = getattr(call.attrs, rule.axis_attr)
        return _Inferred([tuple([layout] * len(layouts))], layout, _with_fields(
            call.attrs, **{rule.axis_attr: _find_axis(layout, 0 if axis is None else axis)}))

    def _rule_split(self, call, rule) -> _Inferred:
        """TVM's InferLayoutSplit: every part in the input's layout where each
        part's shape packs as the input does, else all plain."""
        self._no_desired(call)
        ndim = _tensor_ndim(call.args[0].ty)
        if ndim is None or not isinstance(call.ty, relax.TupleType):
            raise Unsupported("split of unknown rank")
        layout = self._leaf(call.args[0])
        if _packed(layout):
            for part in call.ty.fields:
                if not _can_prove_transform(_initial(ndim), layout, _static_shape_of(part)):
                    layout = _initial(ndim)
                    break
        axis = _find_axis(layout, int(getattr(call.attrs, rule.axis_attr)))
        return _Inferred([layout], tuple([layout] * len(call.ty.fields)),
                         _with_fields(call.attrs, **{rule.axis_attr: axis}))

    def _rule_normalize(self, call, rule) -> _Inferred:
        """TVM's InferLayoutLayerNorm: the first operand's layout followed,
        packed or not, the others plain; the axes renumbered in that layout."""
        self._no_desired(call)
        ndims = [_tensor_ndim(arg.ty) for arg in call.args[:rule.tensor_operands]]
        if None in ndims or len(ndims) < rule.tensor_operands:
            raise Unsupported("operand of unknown rank")
        layout = self._leaf(call.args[0])
        axes = [_find_axis(layout, (int(a) + ndims[0]) % ndims[0])
                for a in getattr(call.attrs, rule.axis_attr)]
        return _Inferred([layout, *(_initial(n) for n in ndims[1:])], layout,
                         _with_fields(call.attrs, **{rule.axis_attr: axes}))

    def _rule_squeeze(self, call, rule) -> _Inferred:
        """TVM's InferLayoutSqueeze: a packed input unpacked; the squeezed
        axes written out in order (the unit ones where None)."""
        self._no_desired(call)
        ndim = _tensor_ndim(call.args[0].ty)
        if ndim is None:
            raise Unsupported("operand of unknown rank")
        shape = _static_shape(call.args[0])
        layout = self._leaf(call.args[0])
        if _packed(layout):
            layout = _initial(ndim)
        if layout != _initial(ndim):
            raise Unsupported("permuted layout")
        axes = getattr(call.attrs, rule.axis_attr)
        if axes is None:
            axes = [i for i, extent in enumerate(shape)
                    if isinstance(extent, tvm.tirx.IntImm) and extent.value == 1]
        axes = [int(a) for a in axes]
        if any(not 0 <= a < ndim for a in axes):
            raise Unsupported("negative squeeze axis")
        squeezed = sorted(set(axes))
        return _Inferred([layout], _initial(ndim - len(squeezed)),
                         _with_fields(call.attrs, **{rule.axis_attr: squeezed}))

    def _rule_reduce(self, call, rule) -> _Inferred:
        """TVM's InferLayoutStatistical, its string operations as they are."""
        self._no_desired(call)
        ndim = _tensor_ndim(call.args[0].ty)
        if ndim is None:
            raise Unsupported("operand of unknown rank")
        axes = getattr(call.attrs, rule.axis_attr)
        axes = range(ndim) if axes is None else [int(a) for a in axes]
        marked = ["0"] * ndim
        for axis in axes:
            marked[(axis + ndim) % ndim] = "#"
        letters = iter(_LETTERS)
        marked = "".join(m if m == "#" else next(letters) for m in marked)
        layout = self._leaf(call.args[0])
        reference = _transpose_sub_layout(marked, _initial(ndim), layout)
        without_factors = [c for c in reference if not c.isdigit()]
        new_axes = [i for i, c in enumerate(without_factors) if c == "#"]
        kept = "".join(
            c for i, c in enumerate(reference)
            if not (c == "#" or (c.isdigit() and reference[i + 1:i + 2] == "#")))
        output = layout if getattr(call.attrs, "keepdims") else kept
        _axes(output)  # TVM parses it: a layout it cannot parse is its error
        return _Inferred([layout], output, _with_fields(call.attrs, **{rule.axis_attr: new_axes}))


def _packed_type(call: relax.Call, own: str, desired: str) -> relax.TensorType:
    """The type of ``call`` computed in layout ``desired`` instead of ``own``."""
    ty = call.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        raise Unsupported("result without shape")
    return _typed_like(ty, _converted_shape(own, desired, ty.shape.values))


def _find_axis(layout: str, axis: int) -> int:
    """TVM's FindAxis: where axis ``axis`` of the plain tensor is in ``layout``."""
    ndim = _ndim(layout)
    letter = _LETTERS[(int(axis) + ndim) % ndim]
    found = "".join(c for c in layout if not c.isdigit()).find(letter)
    if found < 0:
        raise Unsupported("axis not in the layout")
    return found


def _primal(layout: str) -> int:
    return sum(char.isupper() for char in layout)


def _follow(layout: str, ndim: int) -> str:
    """TVM's FollowDecision, for the layouts it handles."""
    if _ndim(layout) == ndim:
        return layout
    if _packed(layout) or _ndim(layout) > ndim or layout != _initial(len(layout)):
        raise Unsupported("broadcast of a packed or permuted layout")
    return _initial(ndim)


def _nested_tensor(ty) -> bool:
    if isinstance(ty, relax.TensorType):
        return True
    if isinstance(ty, relax.TupleType):
        return all(_nested_tensor(field) for field in ty.fields)
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
            for block in func.body.blocks:
                if isinstance(block, relax.DataflowBlock):
                    blocks.append(_BlockConverter(layout_cb).convert(block))
                else:
                    if any(isinstance(b.value, (relax.If, relax.Function, relax.SeqExpr))
                           for b in block.bindings):
                        return None
                    blocks.append(block)
        except Unsupported:
            return None
        except Exception:  # pylint: disable=broad-except
            # Whatever else the rules trip on (an attribute they do not
            # expect, an operand TVM's type inference refuses), TVM's pass
            # decides: it converts the module or raises its own error.
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
