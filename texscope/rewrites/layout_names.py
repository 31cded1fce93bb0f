"""TVM's layout names, as strings: what ConvertLayout's layout decisions are
called (``ABCD``, ``ABCD4b``, ``""`` for a scalar) and the few operations on
them that stage 1's layout rules need (:mod:`texscope.rewrites.packed_layout`).

TVM builds an object of IterVars for each of these; the rules only need the
names, so each operation here is a few string operations.  Anything outside
what they describe raises :class:`Unsupported`.
"""

from __future__ import annotations

from collections.abc import Sequence

import tvm
from tvm import relax

from ..ir.graph import static_dims

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
# A layout is TVM's name of a LayoutDecision ("ABCD", "ABCD4b", "" for a
# scalar), None for a value of unknown rank (not a tensor), or a tuple of
# those for a tuple.
Layout = "str | None | tuple"


class Unsupported(Exception):
    """Raised where the module leaves what the rules describe; the caller
    then runs TVM's pass on the whole module."""


def initial(ndim: int) -> str:
    if not 0 <= ndim <= 26:
        raise Unsupported(f"rank {ndim}")
    return LETTERS[:ndim]


def axes_of(layout: str) -> list[str]:
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


def rank(layout: str) -> int:
    return len(axes_of(layout))


def packed(layout: str) -> bool:
    return any(not char.isupper() for char in layout)


def split_factors(layout: str) -> dict[str, int]:
    """Each split primal axis of a layout and the factor of its subordinate."""
    factors: dict[str, int] = {}
    for axis in axes_of(layout):
        if len(axis) > 1:
            primal = axis[-1].upper()
            if primal in factors or primal not in layout:
                raise Unsupported(f"layout {layout}")
            factors[primal] = int(axis[:-1])
    return factors


def can_prove_transform(src: str, dst: str, shape: Sequence) -> bool:
    """TVM's CanProveLayoutTransform for a plain ``src``: every constant
    extent survives ``dst`` and back (a split axis is a multiple of its factor)."""
    primal = [c for c in dst if c.isupper()]
    if (packed(src) or len(set(src)) != len(src) or len(primal) != len(set(primal))
            or sorted(primal) != sorted(src) or len(shape) != len(src)):
        raise Unsupported(f"transform {src} -> {dst}")
    factors = split_factors(dst)
    for axis, extent in zip(src, shape):
        if not isinstance(extent, tvm.tirx.IntImm):
            raise Unsupported("symbolic extent")
        if axis in factors and extent.value % factors[axis]:
            return False
    return True


def transpose_sub_layout(ref: str, src: str, desired: str) -> str:
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


def initial_of_type(ty) -> Layout:
    if isinstance(ty, relax.TensorType):
        if ty.ndim == -1:
            raise Unsupported("tensor of unknown rank")
        return initial(ty.ndim)
    if isinstance(ty, relax.TupleType):
        return tuple(initial_of_type(field) for field in ty.fields)
    return None


def static_shape(expr: relax.Expr) -> list:
    return static_shape_of(expr.ty)


def static_shape_of(ty) -> list:
    shape = ty.shape if isinstance(ty, relax.TensorType) else None
    if not isinstance(shape, relax.ShapeExpr):
        raise Unsupported("no static shape")
    return shape.values[:]


def int_extents(shape: Sequence) -> list[int]:
    extents = static_dims(shape)
    if extents is None:
        raise Unsupported("symbolic extent")
    return list(extents)


def converted_shape(src: str, dst: str, shape: Sequence) -> list[int]:
    """The shape of a tensor of ``shape`` in layout ``src`` once in ``dst``,
    one of them plain and both of the same axes, every split extent a
    multiple of its factor (what TVM infers for the transform otherwise
    depends on how its analyzer bounds the index map)."""
    extents = int_extents(shape)
    if packed(src):
        if packed(dst) or sorted(c for c in src if c.isupper()) != sorted(dst):
            raise Unsupported(f"transform {src} -> {dst}")
        factors = split_factors(src)
        axes = axes_of(src)
        return [extents[axes.index(axis)] * factors.get(axis, 1) for axis in dst]
    if sorted(c for c in dst if c.isupper()) != sorted(src):
        raise Unsupported(f"transform {src} -> {dst}")
    factors = split_factors(dst)
    out = []
    for axis in axes_of(dst):
        if len(axis) > 1:
            out.append(int(axis[:-1]))
        else:
            factor = factors.get(axis, 1)
            extent = extents[src.index(axis)]
            if extent % factor:
                raise Unsupported(f"extent {extent} split by {factor}")
            out.append(extent // factor)
    return out


def typed_like(ty: relax.TensorType, shape: list[int]) -> relax.TensorType:
    return relax.TensorType(shape, ty.dtype, ty.vdevice)


def find_axis(layout: str, axis: int) -> int:
    """TVM's FindAxis: where axis ``axis`` of the plain tensor is in ``layout``."""
    ndim = rank(layout)
    letter = LETTERS[(int(axis) + ndim) % ndim]
    found = "".join(c for c in layout if not c.isdigit()).find(letter)
    if found < 0:
        raise Unsupported("axis not in the layout")
    return found


def primal(layout: str) -> int:
    return sum(char.isupper() for char in layout)


def follow(layout: str, ndim: int) -> str:
    """TVM's FollowDecision, for the layouts it handles."""
    if rank(layout) == ndim:
        return layout
    if packed(layout) or rank(layout) > ndim or layout != initial(len(layout)):
        raise Unsupported("broadcast of a packed or permuted layout")
    return initial(ndim)
