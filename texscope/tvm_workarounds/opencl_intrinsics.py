"""OpenCL names for the math functions TVM 0.27 lowers to C's.

TVM's OpenCL code generator names most math intrinsics as OpenCL C does
(``sin``, ``exp``...), but has no rule for the inverse trigonometric and
hyperbolic functions nor for ``tan``: they fall to TVM's default rule, C's
float names (``atanf``, ``atan2f``...), which no OpenCL compiler declares.
Any kernel calling one fails to build on the device, TVM's generic OpenCL
build's as well (found by MediaPipe's ``Landmarks2TransformMatrix``, whose
``atan2`` is in face_landmark_with_attention).  OpenCL C has each of them,
overloaded for half and float, under C's double name: they are lowered to
that.

The rules are TVM's own intrinsic lowering table (``opencl.FLowerIntrinsic``),
filled once when this module is imported; an operator TVM gives an OpenCL rule
of its own keeps it.
"""

from __future__ import annotations

import tvm
from tvm import tirx

# Math intrinsics OpenCL C declares under these names that TVM 0.27 lowers to
# C's float names on OpenCL.
MISSING_IN_TVM = ("acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "tan")
_ATTRIBUTE = "opencl.FLowerIntrinsic"


def _as_opencl_builtin(name: str):
    def lower(call):
        return tirx.call_pure_extern(call.ty.dtype, name, *call.args)

    return lower


def register() -> tuple[str, ...]:
    """Give each intrinsic of :data:`MISSING_IN_TVM` that has no OpenCL rule
    its OpenCL name; returns the ones registered (none the second time)."""
    registered = []
    for name in MISSING_IN_TVM:
        if tvm.ir.Op.get(f"tirx.{name}").get_attr(_ATTRIBUTE) is None:
            tirx.op.register_intrin_lowering(f"tirx.{name}", "opencl", f=_as_opencl_builtin(name))
            registered.append(name)
    return tuple(registered)


register()
