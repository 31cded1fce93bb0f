"""Stage 1's layout rules, one function per kind of
:class:`texscope.knowledge.registry.LayoutRule`: each computes, for one call,
what TVM's layout inference of its operator (``FRelaxInferLayout``) decides:
the layout of each tensor operand and of the result, the new attributes, and
(for packed convs and pools) the result type, whose inference in TVM builds
layout objects again.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..ir.graph import known_ndim
from ..ir.rebuild import with_attrs
from .layout_names import (LETTERS, Unsupported, axes_of, can_prove_transform,
                           converted_shape, find_axis, follow, initial, packed, primal, rank,
                           static_shape, static_shape_of, transpose_sub_layout,
                           typed_like)


class Inferred:
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


def packed_type(call: relax.Call, own: str, desired: str) -> relax.TensorType:
    """The type of ``call`` computed in layout ``desired`` instead of ``own``."""
    ty = call.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        raise Unsupported("result without shape")
    return typed_like(ty, converted_shape(own, desired, ty.shape.values))


def elementwise(converter, call, _rule) -> Inferred:
    """TVM's InferLayoutUnaryEwise: the result in the operand's layout."""
    converter.no_desired(call)
    layout = converter.leaf(call.args[0])
    return Inferred([layout], layout, call.attrs)


def broadcast(converter, call, _rule) -> Inferred:
    """TVM's InferLayoutBinaryEwise: the packed operand's layout for both where
    the other's shape packs alike; else the layout of the operand of higher
    rank, the other's broadcast to it; both plain where the ranks are equal
    but the other's shape does not pack (where TVM's rule fails)."""
    converter.no_desired(call)
    first, second = converter.leaf(call.args[0]), converter.leaf(call.args[1])
    ndim1, ndim2 = known_ndim(call.args[0].ty), known_ndim(call.args[1].ty)
    if ndim1 is None or ndim2 is None:
        raise Unsupported("broadcast of non-tensors")
    if packed(first) or packed(second):
        if primal(first) == primal(second):
            if rank(first) >= rank(second):
                shape = static_shape(call.args[1])
                if can_prove_transform(initial(len(shape)), first, shape):
                    return Inferred([first, first], first, call.attrs)
            else:
                shape = static_shape(call.args[0])
                if can_prove_transform(initial(len(shape)), second, shape):
                    return Inferred([second, second], second, call.attrs)
            if ndim1 == ndim2:
                # The other operand cannot be packed alike (a size 1 broadcast
                # on the packed axis): TVM's rule would follow the packed
                # layout and fail, so both stay plain, as a lower rank would.
                plain = initial(ndim1)
                return Inferred([plain, plain], plain, call.attrs)
    if ndim1 <= ndim2:
        if ndim1 == 0:
            return Inferred(["", second], second, call.attrs)
        out = follow(first, ndim2)
        return Inferred([first, out], out, call.attrs)
    if ndim2 == 0:
        return Inferred([first, ""], first, call.attrs)
    out = follow(second, ndim1)
    return Inferred([out, second], out, call.attrs)


def desired(converter, call, rule) -> Inferred:
    """TVM's InferLayoutConv2d: the desired layouts where both operands'
    shapes pack into them (both plain otherwise); the layout attributes
    named after them."""
    data, weight = converter.leaf(call.args[0]), converter.leaf(call.args[1])
    names = rule.layout_attrs
    own = [str(getattr(call.attrs, name)) for name in names]
    desired = converter.layout_cb(call).get(call.op.name)
    if desired is not None:
        desired = [str(d) for d in desired]
        if len(desired) == 2:
            desired.append(desired[0])
        if any(rank(d) == rank(o) for d, o in zip(desired, own)):
            raise Unsupported("desired layout of the same rank")
        if (can_prove_transform(own[0], desired[0], static_shape(call.args[0]))
                and can_prove_transform(own[1], desired[1], static_shape(call.args[1]))):
            data, weight, out = (transpose_sub_layout("ABCD", o, d)
                                 for o, d in zip(own, desired))
            new_attrs = with_attrs(call.attrs, **dict(zip(names, desired)))
            return Inferred([data, weight], out, new_attrs,
                             ty=packed_type(call, own[2], desired[2]))
        data = weight = initial(4)
    if data != initial(4) or weight != initial(4):
        raise Unsupported("operand in a layout the operator would follow")
    return Inferred([data, weight], data, with_attrs(call.attrs))


def window(converter, call, rule) -> Inferred:
    """TVM's InferLayoutPool2d: a packed input's layout kept where its shape
    packs (plain otherwise); the layout attributes named after it."""
    converter.no_desired(call)
    if known_ndim(call.ty) != 4:
        raise Unsupported("window operator not 4-D")
    layout = converter.leaf(call.args[0])
    names = rule.layout_attrs
    own = str(getattr(call.attrs, names[0]))
    if packed(layout):
        desired = transpose_sub_layout(own, "ABCD", layout)
        if can_prove_transform(own, desired, static_shape(call.args[0])):
            return Inferred([layout], layout,
                             with_attrs(call.attrs, **{name: desired for name in names}),
                             ty=packed_type(call, own, desired))
        layout = initial(4)
    if layout != initial(4):
        raise Unsupported("permuted layout")
    return Inferred([layout], layout, with_attrs(call.attrs))


def _unpacked_operand(converter, call) -> tuple[int, str]:
    """The rank of a call's first operand and the plain layout it is given
    (a packed one unpacked); Unsupported for an unknown rank or a permuted
    layout."""
    converter.no_desired(call)
    ndim = known_ndim(call.args[0].ty)
    if ndim is None:
        raise Unsupported("operand of unknown rank")
    layout = converter.leaf(call.args[0])
    if packed(layout):
        layout = initial(ndim)
    if layout != initial(ndim):
        raise Unsupported("permuted layout")
    return ndim, layout


def plain(converter, call, rule) -> Inferred:
    """A packed input unpacked, the result plain; an axis attribute or a
    static axes operand written non-negative."""
    ndim, layout = _unpacked_operand(converter, call)
    if known_ndim(call.ty) is None:
        raise Unsupported("result of unknown rank")
    new_args, new_attrs = {}, call.attrs
    if rule.axis_attr:
        axis = int(getattr(call.attrs, rule.axis_attr))
        new_attrs = with_attrs(call.attrs, **{rule.axis_attr: (axis + ndim) % ndim})
    if rule.axes_operand is not None:
        axes = call.args[rule.axes_operand]
        fields = axes.fields[:] if isinstance(axes, relax.Tuple) else None
        if fields is None or not all(isinstance(a, tvm.tirx.IntImm) for a in fields):
            raise Unsupported("axes not static")
        new_args[rule.axes_operand] = relax.Tuple(
            [tvm.tirx.IntImm("int64", (a.value + ndim) % ndim) for a in fields])
    return Inferred([layout], initial(known_ndim(call.ty)), new_attrs, new_args)


def permute(converter, call, rule) -> Inferred:
    """A packed input unpacked; the order written out (reversed where None)."""
    ndim, layout = _unpacked_operand(converter, call)
    order = getattr(call.attrs, rule.axis_attr)
    order = list(range(ndim - 1, -1, -1)) if order is None else [int(a) for a in order]
    if sorted(order) != list(range(ndim)):
        raise Unsupported("axes not a permutation of non-negative axes")
    return Inferred([layout], layout, with_attrs(call.attrs, **{rule.axis_attr: order}))


def join(converter, call, rule) -> Inferred:
    """TVM's InferLayoutConcat: all operands in the first packed one's
    layout where none is plain, else in the first plain one's."""
    converter.no_desired(call)
    layouts = converter.layout_of(call.args[0])
    if not isinstance(layouts, tuple) or not all(isinstance(l, str) for l in layouts):
        raise Unsupported("join of a non-tuple")
    fields = call.args[0].ty.fields
    layout = layouts[0]
    first_packed = next((i for i, l in enumerate(layouts) if packed(l)), None)
    if first_packed is not None:
        # TVM proves each operand up to the packed one packs as it does
        # (it cannot for the packed one itself) and needs their shapes.
        for field in fields[:first_packed + 1]:
            if not isinstance(field, relax.TensorType) or not isinstance(
                    field.shape, relax.ShapeExpr):
                raise Unsupported("operand without a static shape")
        plain = [l for l in layouts if not packed(l)]
        layout = plain[0] if plain else layouts[first_packed]
    axis = getattr(call.attrs, rule.axis_attr)
    return Inferred([tuple([layout] * len(layouts))], layout, with_attrs(
        call.attrs, **{rule.axis_attr: find_axis(layout, 0 if axis is None else axis)}))


def split(converter, call, rule) -> Inferred:
    """TVM's InferLayoutSplit: every part in the input's layout where each
    part's shape packs as the input does, else all plain."""
    converter.no_desired(call)
    ndim = known_ndim(call.args[0].ty)
    if ndim is None or not isinstance(call.ty, relax.TupleType):
        raise Unsupported("split of unknown rank")
    layout = converter.leaf(call.args[0])
    if packed(layout):
        for part in call.ty.fields[:]:
            if not can_prove_transform(initial(ndim), layout, static_shape_of(part)):
                layout = initial(ndim)
                break
    axis = find_axis(layout, int(getattr(call.attrs, rule.axis_attr)))
    return Inferred([layout], tuple([layout] * len(call.ty.fields)),
                     with_attrs(call.attrs, **{rule.axis_attr: axis}))


def normalize(converter, call, rule) -> Inferred:
    """TVM's InferLayoutLayerNorm: the first operand's layout followed,
    packed or not, the others plain; the axes renumbered in that layout."""
    converter.no_desired(call)
    ndims = [known_ndim(arg.ty) for arg in call.args[:rule.tensor_operands]]
    if None in ndims or len(ndims) < rule.tensor_operands:
        raise Unsupported("operand of unknown rank")
    layout = converter.leaf(call.args[0])
    axes = [find_axis(layout, (int(a) + ndims[0]) % ndims[0])
            for a in getattr(call.attrs, rule.axis_attr)]
    return Inferred([layout, *(initial(n) for n in ndims[1:])], layout,
                     with_attrs(call.attrs, **{rule.axis_attr: axes}))


def squeeze(converter, call, rule) -> Inferred:
    """TVM's InferLayoutSqueeze: a packed input unpacked; the squeezed
    axes written out in order (the unit ones where None)."""
    ndim, layout = _unpacked_operand(converter, call)
    shape = static_shape(call.args[0])
    axes = getattr(call.attrs, rule.axis_attr)
    if axes is None:
        axes = [i for i, extent in enumerate(shape)
                if isinstance(extent, tvm.tirx.IntImm) and extent.value == 1]
    axes = [int(a) for a in axes]
    if any(not 0 <= a < ndim for a in axes):
        raise Unsupported("negative squeeze axis")
    squeezed = sorted(set(axes))
    return Inferred([layout], initial(ndim - len(squeezed)),
                     with_attrs(call.attrs, **{rule.axis_attr: squeezed}))


def reduction(converter, call, rule) -> Inferred | None:
    """TVM's InferLayoutStatistical, its string operations as they are; None
    (the operand read in its own layout) for a reduction to a scalar."""
    converter.no_desired(call)
    ndim = known_ndim(call.args[0].ty)
    if ndim is None:
        raise Unsupported("operand of unknown rank")
    axes = getattr(call.attrs, rule.axis_attr)
    axes = range(ndim) if axes is None else [int(a) for a in axes]
    marked = ["0"] * ndim
    for axis in axes:
        marked[(axis + ndim) % ndim] = "#"
    letters = iter(LETTERS)
    marked = "".join(m if m == "#" else next(letters) for m in marked)
    layout = converter.leaf(call.args[0])
    reference = transpose_sub_layout(marked, initial(ndim), layout)
    without_factors = [c for c in reference if not c.isdigit()]
    new_axes = [i for i, c in enumerate(without_factors) if c == "#"]
    kept = "".join(
        c for i, c in enumerate(reference)
        if not (c == "#" or (c.isdigit() and reference[i + 1:i + 2] == "#")))
    output = layout if getattr(call.attrs, "keepdims") else kept
    if not output:
        # A scalar: reduced from the operand in its own layout.  TVM's pass
        # writes it otherwise (a permute_dims of no axes where it is read as
        # a variable) and, beside other packed calls, can fail ("Cannot
        # broadcast from 5 to 4"): the one call reads plain, the rest packs.
        return None
    axes_of(output)  # TVM parses it: a layout it cannot parse is its error
    return Inferred([layout], output, with_attrs(call.attrs, **{rule.axis_attr: new_axes}))


# Each LayoutRule kind's function.
RULES = {
    "elementwise": elementwise,
    "broadcast": broadcast,
    "desired": desired,
    "window": window,
    "plain": plain,
    "permute": permute,
    "join": join,
    "split": split,
    "normalize": normalize,
    "squeeze": squeeze,
    "reduce": reduction,
}
