"""MediaPipe's custom TFLite operators, converted to Relax.

``Convolution2DTransposeBias`` is the upsampling head of MediaPipe's selfie
segmentation models: TFLite's reference transpose conv with a bias added,
which MediaPipe registers as a custom operator (its
``mediapipe/util/tflite/operations/transpose_conv_bias.cc``; TFLite's
XNNPACK delegate implements it too).  Its inputs are the NHWC data, the
float32 weights in OHWI order and the bias; its options are the raw bytes of
TFLite's ``TfLiteTransposeConvParams``: the padding (1 SAME, 2 VALID), the
stride along the width, the stride along the height, as 32-bit integers.

The output's size, and its padding, are MediaPipe's: with SAME, a total of
``max(0, kernel - (size - 1) % stride - 1)`` rows (columns) is cropped from
the full transpose ``stride * (size - 1) + kernel``, half of it (rounded
down) at the top (left) and the rest at the bottom (right); VALID crops
nothing.
"""

from __future__ import annotations

import struct

from tvm import relax

TRANSPOSE_CONV_BIAS = b"Convolution2DTransposeBias"
_SAME, _VALID = 1, 2


def _cropped(size: int, kernel: int, stride: int, padding: int) -> tuple[int, int]:
    """Rows (or columns) cropped before and after the full transpose."""
    total = max(0, kernel - (size - 1) % stride - 1) if padding == _SAME else 0
    return total // 2, total - total // 2


def transpose_conv_bias(converter, op) -> relax.Expr:
    """``Convolution2DTransposeBias`` as ``conv2d_transpose`` plus the bias.

    ``converter`` is TVM's TFLite ``OperatorConverter`` converting ``op``.
    """
    data, weights, bias = converter.get_input_tensors(op)
    (output,) = converter.get_output_tensors(op)
    options = bytes(op.CustomOptionsAsNumpy()) if op.CustomOptionsLength() else b""
    if len(options) < 12:
        raise ValueError(f"expected 12 bytes of options (padding, stride_w, stride_h), "
                         f"found {len(options)}")
    padding, stride_w, stride_h = struct.unpack_from("<3i", options)
    if padding not in (_SAME, _VALID) or stride_w < 1 or stride_h < 1:
        raise ValueError(f"padding {padding} (1 SAME or 2 VALID expected), "
                         f"strides {stride_h} x {stride_w}")
    types = {converter.get_tensor_type_str(t.tensor.Type()) for t in (data, weights, bias, output)}
    if types != {"float32"}:
        raise ValueError(f"MediaPipe's kernel is float32 only, found {sorted(types)}")
    _, height, width, _ = (int(d) for d in converter.get_tensor_shape(data))
    out_channels, kernel_h, kernel_w, _ = (int(d) for d in converter.get_tensor_shape(weights))
    top, bottom = _cropped(height, kernel_h, stride_h, padding)
    left, right = _cropped(width, kernel_w, stride_w, padding)
    expected = (stride_h * (height - 1) + kernel_h - top - bottom,
                stride_w * (width - 1) + kernel_w - left - right, out_channels)
    found = tuple(int(d) for d in converter.get_tensor_shape(output))[1:]
    if found != expected:
        raise ValueError(f"output of shape {found}, where the operator makes {expected}")
    # Relax's transpose conv takes its kernel as (in, out, height, width), and
    # TVM legalizes it for NCHW data only (its CPU build is the reference).
    kernel = relax.op.permute_dims(converter.get_tensor_expr(weights), axes=[3, 0, 1, 2])
    image = relax.op.permute_dims(converter.get_tensor_expr(data), axes=[0, 3, 1, 2])
    upsampled = relax.op.nn.conv2d_transpose(
        image, kernel, strides=(stride_h, stride_w), padding=(top, left, bottom, right),
        data_layout="NCHW", kernel_layout="IOHW", out_dtype="float32")
    channels_last = relax.op.permute_dims(upsampled, axes=[0, 2, 3, 1])
    return relax.op.add(channels_last, converter.get_tensor_expr(bias))
