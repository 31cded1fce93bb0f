"""Operators TVM 0.27 cannot build for a GPU, rewritten into ones it can and
that pack.

- ``R.ewise_fma(a, b, c)`` has no legalization: VM codegen stops ("CodeGenVM
  cannot emit this Relax operator").  It becomes ``a * b + c``.
- ``R.nn.conv2d_transpose`` legalizes only with an IOHW kernel, and nothing
  packs it.  One of static shape, padded no further than its kernel
  reaches (``padding <= dilation * (kernel - 1)``), becomes what it
  computes: its data with ``stride - 1`` zeros inserted between pixels (a
  reshape, a pad and a slice), convolved with the kernel flipped in space
  and its channel axes swapped, padded by ``dilation * (kernel - 1) -
  padding`` (plus the output padding at the bottom and right).  That conv
  packs and reads a texture like any other.  Upsampling decoders
  (segmentation) use them.

  Where the kernel is as large as the stride, unpadded and undilated (one
  group), the windows do not overlap: each input pixel writes its own
  ``stride`` x ``stride`` block of the output.  That is a 1 x 1 conv to
  ``out * stride_h * stride_w`` channels, whose channels are then moved to
  the positions they stand for (a depth to space: reshape, permute,
  reshape).  The zero-inserted data would be ``stride_h * stride_w`` times
  the input, and its conv would multiply mostly zeros: MediaPipe's selfie
  segmentation upsamples 16 channels of 128 x 128 by 2, and its zero-inserted
  data, 4 MiB, put the texture plan's peak 1.1 MiB above TVM's all-buffer
  build's.

  With ``groups`` > 1 the transpose's kernel is ``(in, out / groups, kh,
  kw)`` in IOHW order: group ``g`` maps input channels ``g * in / groups``
  onwards to output channels ``g * out / groups`` onwards.  The conv's
  kernel is ``(out, in / groups, kh, kw)``, so each group's block is
  transposed on its own: a reshape to ``(groups, in / groups, out / groups,
  kh, kw)``, a swap of the two channel axes, a reshape back.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..ir.graph import static_shape
from ..ir.rebuild import rewrite_bindings


def _to_layout(expr, source: str, target: str):
    """``expr`` in layout ``source`` permuted to ``target`` (same letters)."""
    if source == target:
        return expr
    return relax.op.permute_dims(expr, [source.index(axis) for axis in target])


def _plain(layout: str, axes: str) -> bool:
    return len(layout) == len(axes) and sorted(layout) == sorted(axes)


def _zero_inserted(data, shape: list[int], strides: tuple[int, int]):
    """NCHW ``data`` with ``stride - 1`` zeros after each pixel but the last."""
    batch, channels, height, width = shape
    stride_h, stride_w = strides
    if stride_h == stride_w == 1:
        return data
    spread = relax.op.reshape(data, [batch, channels, height, 1, width, 1])
    spread = relax.op.nn.pad(spread, [0, 0, 0, 0, 0, 0, 0, stride_h - 1, 0, 0, 0, stride_w - 1])
    spread = relax.op.reshape(spread, [batch, channels, height * stride_h, width * stride_w])
    return relax.op.strided_slice(spread, axes=[2, 3], begin=[0, 0],
                                  end=[(height - 1) * stride_h + 1, (width - 1) * stride_w + 1])


def _conv_kernel(weight, shape: tuple[int, ...], layout: str, groups: int):
    """The transpose's kernel as the equivalent conv's OIHW kernel, not yet flipped."""
    if groups == 1:
        # The transpose's I is the data's channels: the conv's input channels.
        return _to_layout(weight, layout, "OIHW")
    inputs, out_per_group, height, width = (shape[layout.index(axis)] for axis in "IOHW")
    blocks = relax.op.reshape(_to_layout(weight, layout, "IOHW"),
                              [groups, inputs // groups, out_per_group, height, width])
    return relax.op.reshape(relax.op.permute_dims(blocks, [0, 2, 1, 3, 4]),
                            [groups * out_per_group, inputs // groups, height, width])


def _pixel_shuffled(data, nchw: list[int], weight, shape: list[int], layout: str,
                    out_dtype: str):
    """The transpose of NCHW ``data`` (of shape ``nchw``) with an unpadded
    kernel ``weight`` (in ``layout``, of ``shape``) as large as its stride,
    as a 1 x 1 conv to one channel per (output channel, row, column) of the
    kernel, each then moved to its row and column of the stride's block."""
    batch, _, height, width = nchw
    inputs, outputs, kernel_h, kernel_w = (shape[layout.index(axis)] for axis in "IOHW")
    # (I, O, kh, kw) -> (O, kh, kw, I): output channel (o * kh + i) * kw + j.
    per_position = relax.op.permute_dims(_to_layout(weight, layout, "IOHW"), [1, 2, 3, 0])
    kernel = relax.op.reshape(per_position, [outputs * kernel_h * kernel_w, inputs, 1, 1])
    blocks = relax.op.nn.conv2d(data, kernel, data_layout="NCHW", kernel_layout="OIHW",
                                out_dtype=out_dtype)
    blocks = relax.op.reshape(blocks, [batch, outputs, kernel_h, kernel_w, height, width])
    placed = relax.op.permute_dims(blocks, [0, 1, 4, 2, 5, 3])
    return relax.op.reshape(placed, [batch, outputs, height * kernel_h, width * kernel_w])


def _transpose_as_conv(call: relax.Call) -> relax.Expr | None:
    attrs = call.attrs
    data_layout, kernel_layout = str(attrs.data_layout), str(attrs.kernel_layout)
    out_layout = str(attrs.out_layout) or data_layout
    data, weight = call.args
    data_shape, weight_shape = static_shape(data.ty), static_shape(weight.ty)
    if (data_shape is None or weight_shape is None
            or not (_plain(data_layout, "NCHW") and _plain(kernel_layout, "OIHW")
                    and _plain(out_layout, "NCHW"))):
        return None
    kernel = [weight_shape[kernel_layout.index(axis)] for axis in "HW"]
    dilation = [int(d) for d in attrs.dilation]
    top, left, bottom, right = (int(p) for p in attrs.padding)
    extra_h, extra_w = (int(p) for p in attrs.output_padding)
    reach = [d * (k - 1) for d, k in zip(dilation, kernel)]
    padding = [reach[0] - top, reach[1] - left, reach[0] - bottom + extra_h,
               reach[1] - right + extra_w]
    if min(padding) < 0:
        return None
    strides = tuple(int(s) for s in attrs.strides)
    groups = int(attrs.groups)
    nchw = [data_shape[data_layout.index(axis)] for axis in "NCHW"]
    if (tuple(kernel) == strides and dilation == [1, 1] and groups == 1
            and (top, left, bottom, right, extra_h, extra_w) == (0,) * 6):
        out = _pixel_shuffled(_to_layout(data, data_layout, "NCHW"), nchw, weight,
                              weight_shape, kernel_layout, attrs.out_dtype)
        return _to_layout(out, "NCHW", out_layout)
    spread = _zero_inserted(_to_layout(data, data_layout, "NCHW"), nchw, strides)
    flipped = relax.op.flip(relax.op.flip(_conv_kernel(weight, weight_shape, kernel_layout,
                                                       groups), 2), 3)
    out = relax.op.nn.conv2d(spread, flipped, strides=1, padding=padding, dilation=dilation,
                             groups=groups, data_layout="NCHW", kernel_layout="OIHW",
                             out_layout="NCHW", out_dtype=attrs.out_dtype)
    return _to_layout(out, "NCHW", out_layout)


def _fma_as_multiply_add(call: relax.Call) -> relax.Expr:
    a, b, c = call.args
    return relax.op.add(relax.op.multiply(a, b), c)


_REWRITES = {
    tvm.ir.Op.get("relax.ewise_fma"): _fma_as_multiply_add,
    tvm.ir.Op.get("relax.nn.conv2d_transpose"): _transpose_as_conv,
}


def _decomposed(value: relax.Expr, _bound) -> relax.Expr | None:
    if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
        return None
    rewrite = _REWRITES.get(value.op)
    return None if rewrite is None else rewrite(value)


def DecomposeForGPU() -> tvm.ir.transform.Pass:  # pylint: disable=invalid-name
    """Rewrite ``ewise_fma`` and static ``conv2d_transpose`` (see the
    module docstring); anything else is left as it is."""

    @tvm.transform.module_pass(opt_level=0, name="texscope.DecomposeForGPU")
    def decompose(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_bindings(mod, _decomposed)

    return decompose


def _cpu_builds(call: relax.Call) -> bool:
    """Whether TVM's own CPU build takes ``call`` as it is: a transpose with
    TVM's default layouts legalizes, an ``ewise_fma`` never does."""
    if call.op.same_as(tvm.ir.Op.get("relax.nn.conv2d_transpose")):
        attrs = call.attrs
        return (str(attrs.data_layout), str(attrs.kernel_layout),
                str(attrs.out_layout) or str(attrs.data_layout)) == ("NCHW", "IOHW", "NCHW")
    return False


def DecomposeForCPU() -> tvm.ir.transform.Pass:  # pylint: disable=invalid-name
    """The rewrites of :func:`DecomposeForGPU` applied only where TVM's CPU
    build cannot take the call (an ``ewise_fma``, a transpose in another
    layout than IOHW): the reference a build is compared with then runs,
    and a transpose it can build still checks the GPU's decomposition."""

    def rewrite(value: relax.Expr, bound) -> relax.Expr | None:
        if isinstance(value, relax.Call) and value.op in _REWRITES and _cpu_builds(value):
            return None
        return _decomposed(value, bound)

    @tvm.transform.module_pass(opt_level=0, name="texscope.DecomposeForCPU")
    def decompose(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_bindings(mod, rewrite)

    return decompose
