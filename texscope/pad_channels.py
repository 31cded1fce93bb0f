"""Zero channels so a conv whose channel counts are not multiples of 4 packs too.

The RGB stem of a vision model has 3 input channels: ConvertLayout cannot pack
it to NCHW4c, so it would read a buffer.  Padding the data and the weights'
input channels with zeros, and the weights' output channels then slicing them
off, leaves the result unchanged and makes every operand packable.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from .targets import TEXEL_LANES


def _round_up(n: int) -> int:
    return -(-n // TEXEL_LANES) * TEXEL_LANES


def _static(expr) -> list[int] | None:
    shape = expr.ty.shape
    if not isinstance(shape, relax.ShapeExpr) or not all(
        isinstance(d, tvm.tirx.IntImm) for d in shape.values
    ):
        return None
    return [int(d) for d in shape.values]


def _pad_axes(expr, pads: dict[int, int]):
    rank = len(_static(expr))
    width = []
    for axis in range(rank):
        width += [0, pads.get(axis, 0)]
    return relax.op.nn.pad(expr, width)


def _padded(call: relax.Call) -> relax.Expr | None:
    """The conv with padded channels, or None when it needs none."""
    attrs = call.attrs
    if (int(attrs.groups) != 1 or str(attrs.data_layout) != "NCHW"
            or str(attrs.kernel_layout) != "OIHW" or str(attrs.out_layout) != "NCHW"):
        return None
    data, weight = call.args
    data_shape, weight_shape = _static(data), _static(weight)
    if data_shape is None or weight_shape is None:
        return None
    out_channels, in_channels = weight_shape[0], weight_shape[1]
    pad_in = _round_up(in_channels) - in_channels
    pad_out = _round_up(out_channels) - out_channels
    if not pad_in and not pad_out:
        return None
    if pad_in:
        data = _pad_axes(data, {1: pad_in})
    weight = _pad_axes(weight, {0: pad_out, 1: pad_in})
    out = relax.op.nn.conv2d(
        data, weight, strides=attrs.strides, padding=attrs.padding, dilation=attrs.dilation,
        groups=1, data_layout="NCHW", kernel_layout="OIHW", out_layout="NCHW",
        out_dtype=attrs.out_dtype,
    )
    if pad_out:
        out = relax.op.strided_slice(out, axes=[1], begin=[0], end=[out_channels])
    return out


def PadChannels() -> tvm.ir.transform.Pass:  # pylint: disable=invalid-name
    """Pad conv2d channels to multiples of 4 (see the module docstring)."""
    pattern = is_op("relax.nn.conv2d")(wildcard(), wildcard())

    def rewrite(expr: relax.Expr, matches) -> relax.Expr:
        # expr may be the variable the conv is bound to; the match is the call.
        padded = _padded(matches[pattern])
        return expr if padded is None else padded

    @tvm.transform.module_pass(opt_level=0, name="texscope.PadChannels")
    def pad(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        functions = {
            gvar: rewrite_call(pattern, rewrite, func) if isinstance(func, relax.Function) else func
            for gvar, func in mod.functions.items()
        }
        return relax.transform.Normalize()(
            tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)
        )

    return pad
