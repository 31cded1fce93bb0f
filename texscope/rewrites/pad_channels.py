"""Zero channels so an operator whose channel counts are not multiples of 4 packs too.

The RGB stem of a vision model has 3 input channels, and published mobile
models have convs of 36 or 42 channels: ConvertLayout cannot pack those to
NCHW4c, so they would read buffers.  Zero channels leave the result unchanged
and make every operand packable:

- an ungrouped operator gets zero input channels in its data and kernel and
  zero output channels (kernel) that a slice then drops;
- a grouped or depthwise one gets whole zero groups appended (zero data
  channels and zero kernels for them), as many as make both channel counts
  multiples of 4, and the slice drops their outputs.

Which operators, where their layouts and group count are, and which axis
letters name the channels is the registry's data
(:class:`texscope.knowledge.registry.ChannelPadding`, on conv2d's entry):
any plain data, kernel and output layout (NCHW, NHWC, OIHW, HWIO, HWOI...) is
handled through the positions of those letters.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..ir.graph import static_shape
from ..ir.rebuild import rewrite_bindings, with_attrs
from ..knowledge import registry
from ..knowledge.registry import ChannelPadding
from ..knowledge.targets import TEXEL_LANES


def _round_up(n: int) -> int:
    return -(-n // TEXEL_LANES) * TEXEL_LANES


def _channels(expr, axis: int) -> int | None:
    """The static extent of ``expr``'s axis ``axis``; None where it is symbolic
    or the shape unknown.  Only channel axes need to be static: an image of
    symbolic height and width pads its channels as any other."""
    shape = expr.ty.shape
    if not isinstance(shape, relax.ShapeExpr) or not isinstance(shape.values[axis],
                                                                 tvm.tirx.IntImm):
        return None
    return int(shape.values[axis])


def _pad_axes(expr, pads: dict[int, int]):
    rank = expr.ty.ndim
    width = []
    for axis in range(rank):
        width += [0, pads.get(axis, 0)]
    return relax.op.nn.pad(expr, width)


def _plain(layout: str, axes: str) -> bool:
    """A layout of upper-case axes only (not packed), naming ``axes`` once each."""
    return layout.isalpha() and layout.isupper() and all(layout.count(a) == 1 for a in axes)


def _extra_groups(groups: int, in_per_group: int, out_per_group: int) -> int:
    """Fewest zero groups after which both channel counts are multiples of 4
    (at most 3: a multiple of 4 groups always is)."""
    return next(k for k in range(TEXEL_LANES)
                if (groups + k) * in_per_group % TEXEL_LANES == 0
                and (groups + k) * out_per_group % TEXEL_LANES == 0)


def _padded(call: relax.Call, spec: ChannelPadding) -> relax.Expr | None:
    """The call with padded channels, or None when it needs none."""
    attrs = call.attrs
    data_layout, kernel_layout, out_layout = (str(getattr(attrs, a)) for a in spec.layout_attrs)
    out_layout = out_layout or data_layout
    kernel_axes = spec.kernel_out + spec.kernel_in
    if not (_plain(data_layout, spec.channel) and _plain(kernel_layout, kernel_axes)
            and _plain(out_layout, spec.channel)):
        return None
    data, weight = call.args[:2]
    channel, out_axis, in_axis = (data_layout.index(spec.channel),
                                  kernel_layout.index(spec.kernel_out),
                                  kernel_layout.index(spec.kernel_in))
    weight_shape = static_shape(weight.ty)
    if weight_shape is None or _channels(data, channel) is None:
        return None
    groups = int(getattr(attrs, spec.groups))
    out_channels, in_per_group = weight_shape[out_axis], weight_shape[in_axis]
    if groups == 1:
        pad_data = _round_up(in_per_group) - in_per_group
        pad_weight = {out_axis: _round_up(out_channels) - out_channels, in_axis: pad_data}
    else:
        extra = _extra_groups(groups, in_per_group, out_channels // groups)
        pad_data = extra * in_per_group
        pad_weight = {out_axis: extra * (out_channels // groups)}
    if not pad_data and not pad_weight[out_axis]:
        return None
    if pad_data:
        data = _pad_axes(data, {channel: pad_data})
    weight = _pad_axes(weight, pad_weight)
    if groups != 1:
        attrs = with_attrs(attrs, **{spec.groups: groups + pad_data // in_per_group})
    out = relax.Call(call.op, [data, weight, *call.args[2:]], attrs)
    if pad_weight[out_axis]:
        out = relax.op.strided_slice(out, axes=[out_layout.index(spec.channel)], begin=[0],
                                     end=[out_channels])
    return out


def PadChannels() -> tvm.ir.transform.Pass:  # pylint: disable=invalid-name
    """Pad channels to multiples of 4 where the registry says how (see the
    module docstring)."""

    @tvm.transform.module_pass(opt_level=0, name="texscope.PadChannels")
    def pad(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        specs = {tvm.ir.Op.get(op): spec for op, spec in registry.channel_paddings().items()}

        def rewrite(value, _bound):
            spec = specs.get(value.op) if isinstance(value, relax.Call) else None
            return None if spec is None or len(value.args) < 2 else _padded(value, spec)

        return rewrite_bindings(mod, rewrite) if specs else mod

    return pad
