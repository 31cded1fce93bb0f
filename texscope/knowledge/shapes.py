"""Static shapes: the one test of "static" every module uses.

A leaf module (TVM only) of the lowest job but errors, so that the op
registry asks it as the IR graph and everything above do.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax


def static_dims(dims) -> tuple[int, ...] | None:
    """A shape's dimensions (Relax or TIR expressions) as integers; None if
    any is symbolic.  The one test of "static" every module uses."""
    # A slice reads an FFI array in one pass (iterating asks its length and
    # checks the index again for every element).
    dims = dims[:] if isinstance(dims, tvm_ffi.Array) else list(dims)
    values = []
    for dim in dims:
        if not isinstance(dim, tvm.tirx.IntImm):
            return None
        values.append(dim.value)
    return tuple(values)


def static_shape(ty) -> tuple[int, ...] | None:
    """The static shape of a tensor type; None if symbolic, unknown, or not a
    tensor type."""
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    return static_dims(ty.shape.values)
