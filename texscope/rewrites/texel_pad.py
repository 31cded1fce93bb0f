"""A channel pad by whole texels, done on the packed tensor.

Published mobile models pad a residual's channels with zeros to add it to a
wider conv output (BlazeFace: 24 to 28, 28 to 32, 32 to 36).  TVM gives pad no
layout inference, so ConvertLayout unpacks the packed tensor, pads it and
packs it again: three kernels, two of them all-buffer tensors alive beside
the conv (face_detection_short_range needed 37 KiB more than its all-buffer
build).  Where the pad adds whole texels to a tensor whose channels fill its
texels, the same zeros are a pad of the packed tensor's channel-block axis:

    layout_transform(pad(layout_transform(x, unpack), channels), pack)
    ->  pad(x, channel blocks)

The index maps are checked, not named: the pack must undo the unpack, and
the unpack must write channel ``block * 4 + lane`` to the padded axis.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.sym import Analyzer

from ..ir.graph import static_shape
from ..ir.rebuild import bound_call, rewrite_bindings
from ..knowledge.targets import TEXEL_LANES

_PAD_OP = tvm.ir.Op.get("relax.nn.pad")
_LAYOUT_TRANSFORM_OP = tvm.ir.Op.get("relax.layout_transform")


def _block_axis(unpack: tvm.tirx.IndexMap, shape: tuple[int, ...], channel: int) -> int | None:
    """The packed axis whose blocks of 4 the unpack writes to output axis
    ``channel`` (with the lanes, the last axis); None where it writes
    anything else there."""
    indices = [tvm.tirx.Var(f"i{axis}", "int64") for axis in range(len(shape))]
    written = unpack.map_indices(indices)
    analyzer = Analyzer()
    for index, extent in zip(indices, shape):
        analyzer.bind(index, tvm.ir.Range(0, extent))
    lane = indices[-1]
    for axis, index in enumerate(indices[:-1]):
        if analyzer.can_prove_equal(written[channel], index * TEXEL_LANES + lane):
            return axis
    return None


def _inverse(pack: tvm.tirx.IndexMap, unpack: tvm.tirx.IndexMap, shape) -> bool:
    """Whether ``pack`` undoes ``unpack`` on a tensor of ``shape``."""
    indices = [tvm.tirx.Var(f"i{axis}", "int64") for axis in range(len(shape))]
    analyzer = Analyzer()
    for index, extent in zip(indices, shape):
        analyzer.bind(index, tvm.ir.Range(0, extent))
    back = pack.map_indices(unpack.map_indices(indices))
    return len(back) == len(indices) and all(
        analyzer.can_prove_equal(b, i) for b, i in zip(back, indices))


def _packed_pad(pack_call: relax.Call, pad_call: relax.Call, unpack_call: relax.Call):
    """The pad of the packed tensor, or None where the chain is not a
    whole-texel channel pad of a tensor whose channels fill its texels."""
    packed = unpack_call.args[0]
    shape = static_shape(packed.ty)
    if shape is None or shape[-1] != TEXEL_LANES or str(pad_call.attrs.pad_mode) != "constant":
        return None
    if any(call.attrs.pad_value is not None for call in (unpack_call, pack_call)):
        return None
    unpack, pack = unpack_call.attrs.index_map, pack_call.attrs.index_map
    if not _inverse(pack, unpack, shape):
        return None
    widths = [int(w) for w in pad_call.attrs.pad_width]
    padded = [axis for axis in range(len(widths) // 2) if widths[2 * axis] or widths[2 * axis + 1]]
    if len(padded) != 1 or any(w % TEXEL_LANES for w in widths):
        return None
    (channel,) = padded
    block = _block_axis(unpack, shape, channel)
    if block is None:
        return None
    packed_widths = [0] * (2 * len(shape))
    packed_widths[2 * block] = widths[2 * channel] // TEXEL_LANES
    packed_widths[2 * block + 1] = widths[2 * channel + 1] // TEXEL_LANES
    result = relax.op.nn.pad(packed, packed_widths, pad_mode="constant",
                             pad_value=float(pad_call.attrs.pad_value))
    expected = static_shape(pack_call.ty)
    out_shape = list(shape)
    out_shape[block] += packed_widths[2 * block] + packed_widths[2 * block + 1]
    return result if expected == tuple(out_shape) else None


def _texel_pad(value: relax.Expr, bound: dict) -> relax.Expr | None:
    """``value``'s rewrite where it packs a pad of an unpack (``bound``: the
    values of the variables in scope)."""
    pack = bound_call(value, _LAYOUT_TRANSFORM_OP, bound)
    pad = None if pack is None else bound_call(pack.args[0], _PAD_OP, bound)
    unpack = None if pad is None else bound_call(pad.args[0], _LAYOUT_TRANSFORM_OP, bound)
    return None if unpack is None else _packed_pad(pack, pad, unpack)


def PadWholeTexels() -> tvm.ir.transform.Pass:  # pylint: disable=invalid-name
    """Channel pads of whole texels between an unpack and a pack, done on the
    packed tensor (see the module docstring)."""

    @tvm.transform.module_pass(opt_level=0, name="texscope.PadWholeTexels")
    def pad(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_bindings(mod, _texel_pad)

    return pad
