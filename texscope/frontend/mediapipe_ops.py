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

face_landmark_with_attention crops regions of interest (lips, eyes) out of
its feature map and maps the landmarks found in them back, with three more
operators (MediaPipe's ``landmarks_to_transform_matrix.cc``,
``transform_tensor_bilinear.cc`` and ``transform_landmarks.cc``, read; their
options, a FlexBuffer map, are parsed as TFLite's GPU delegate parses them),
all version 2:

- ``Landmarks2TransformMatrix``: from landmarks (1, n, 3), the 4x4 matrix
  mapping a crop's pixels to the landmarks' frame.  The crop is turned by
  ``target_rotation_radians`` less the angle from the left to the right
  rotation landmark; its box bounds the ``subset_idxs`` landmarks so turned,
  scaled by ``scale_x``, ``scale_y``, with ``output_width`` x
  ``output_height`` pixels.  Relax operators (``atan2``, ``take``, ``max``...).
- ``TransformTensorBilinear``: the crop of an NHWC map through that matrix,
  sampled bilinearly about pixel centres; a pixel mapped outside the map is 0.
  A gather at computed indices, written as a TE compute.
- ``TransformLandmarks``: (x, y) of landmarks (1, n, 2 or 3) through the
  matrix's first two rows; a third coordinate passes through.
"""

from __future__ import annotations

import struct

import numpy as np
from tvm import relax, te, tirx

TRANSPOSE_CONV_BIAS = b"Convolution2DTransposeBias"
LANDMARKS_TO_TRANSFORM_MATRIX = b"Landmarks2TransformMatrix"
TRANSFORM_TENSOR_BILINEAR = b"TransformTensorBilinear"
TRANSFORM_LANDMARKS = b"TransformLandmarks"
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
    data_shape, weight_shape, _, out_shape = _float32_shapes(converter,
                                                             (data, weights, bias, output))
    _, height, width, _ = data_shape
    out_channels, kernel_h, kernel_w, _ = weight_shape
    top, bottom = _cropped(height, kernel_h, stride_h, padding)
    left, right = _cropped(width, kernel_w, stride_w, padding)
    expected = (stride_h * (height - 1) + kernel_h - top - bottom,
                stride_w * (width - 1) + kernel_w - left - right, out_channels)
    found = out_shape[1:]
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


def _version(converter, op) -> int:
    return int(converter.model.OperatorCodes(op.OpcodeIndex()).Version())


def _require_version_2(converter, op) -> None:
    version = _version(converter, op)
    if version != 2:
        raise ValueError(f"version {version} of the operator; texscope converts version 2")


def _float32_shapes(converter, tensors) -> list[tuple[int, ...]]:
    types = {converter.get_tensor_type_str(t.tensor.Type()) for t in tensors}
    if types != {"float32"}:
        raise ValueError(f"MediaPipe's kernel is float32 only, found {sorted(types)}")
    return [tuple(int(d) for d in converter.get_tensor_shape(t)) for t in tensors]


def _flexbuffer_options(op, keys: dict) -> dict:
    """The operator's FlexBuffer map, each of ``keys`` (name -> type) there
    and of its type (int read as float where a float is wanted)."""
    from flatbuffers import flexbuffers  # the tflite package's dependency

    raw = bytes(op.CustomOptionsAsNumpy()) if op.CustomOptionsLength() else b""
    try:
        options = flexbuffers.Loads(raw) if raw else None
    except Exception as err:  # a malformed buffer fails anywhere in the decoder
        raise ValueError(f"options are not a FlexBuffer map ({type(err).__name__})") from None
    if not isinstance(options, dict):
        raise ValueError("options are not a FlexBuffer map")
    missing = sorted(set(keys) - set(options))
    if missing:
        raise ValueError(f"options lack {', '.join(missing)}")
    for key, kind in keys.items():
        value = options[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            options[key] = value = float(value)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"option {key} = {value!r}, expected {kind.__name__}")
    return options


def _matrix_rows(converter, matrix) -> tuple[relax.Var, relax.Var]:
    """The first two rows (1, 4) of a (1, 4, 4) matrix tensor, bound (TE
    computes take bound values): the ones the transforms read."""
    whole = converter.get_tensor_expr(matrix)
    rows = [converter.bb.emit(relax.op.reshape(
        relax.op.strided_slice(whole, [1], [row], [row + 1]), (1, 4))) for row in (0, 1)]
    return rows[0], rows[1]


def _scalar(value: float) -> relax.Expr:
    return relax.const(np.full((1, 1), value, "float32"))


def _column(tensor: relax.Expr, axis: int, index: int) -> relax.Expr:
    return relax.op.strided_slice(tensor, [axis], [index], [index + 1])


def landmarks_to_transform_matrix(converter, op) -> relax.Expr:
    """``Landmarks2TransformMatrix`` (version 2) in Relax operators, computed
    in MediaPipe's order (:func:`transform_tensor_bilinear` samples with it)."""
    _require_version_2(converter, op)
    (landmarks,), (output,) = converter.get_input_tensors(op), converter.get_output_tensors(op)
    shape, out_shape = _float32_shapes(converter, (landmarks, output))
    if len(shape) != 3 or shape[0] != 1 or shape[2] != 3 or out_shape != (1, 4, 4):
        raise ValueError(f"landmarks of shape {shape} into {out_shape}; expected (1, n, 3) "
                         f"into (1, 4, 4)")
    options = _flexbuffer_options(op, {
        "left_rotation_idx": int, "right_rotation_idx": int, "subset_idxs": list,
        "target_rotation_radians": float, "output_width": int, "output_height": int,
        "scale_x": float, "scale_y": float})
    count = shape[1]
    indices = [options["left_rotation_idx"], options["right_rotation_idx"],
               *options["subset_idxs"]]
    if not options["subset_idxs"] or any(not isinstance(i, int) or not 0 <= i < count
                                         for i in indices):
        raise ValueError(f"landmark indices {indices} outside the {count} landmarks "
                         "(or no subset)")
    if min(options["output_width"], options["output_height"]) < 1 or \
            min(options["scale_x"], options["scale_y"]) <= 0:
        raise ValueError("output size and scales must be positive")
    # MediaPipe pairs the subset's indices, the last with itself when odd:
    # every index is in the box, the pairing changes nothing.
    xy = relax.op.strided_slice(converter.get_tensor_expr(landmarks), [2], [0], [2])
    # Indices checked above; "clip" spares TOPI's warning about "fast" mode.
    ends = relax.op.take(xy, relax.const(np.array(indices[:2], "int32")), axis=1, mode="clip")
    delta = relax.op.subtract(_column(ends, 1, 1), _column(ends, 1, 0))  # (1, 1, 2)
    angle = relax.op.atan2(_column(delta, 2, 1), _column(delta, 2, 0))
    rotation = relax.op.reshape(
        relax.op.subtract(_scalar(options["target_rotation_radians"]), angle), (1, 1))
    cos, sin = relax.op.cos(rotation), relax.op.sin(rotation)
    subset = relax.op.take(xy, relax.const(np.array(indices[2:], "int32")), axis=1, mode="clip")
    x, y = (relax.op.reshape(_column(subset, 2, i), (1, len(indices) - 2)) for i in (0, 1))
    turned_x = relax.op.subtract(relax.op.multiply(cos, x), relax.op.multiply(sin, y))
    turned_y = relax.op.add(relax.op.multiply(sin, x), relax.op.multiply(cos, y))
    low_x, high_x = (f(turned_x, axis=1, keepdims=True) for f in (relax.op.min, relax.op.max))
    low_y, high_y = (f(turned_y, axis=1, keepdims=True) for f in (relax.op.min, relax.op.max))
    two = _scalar(2.0)
    mid_x = relax.op.divide(relax.op.add(low_x, high_x), two)
    mid_y = relax.op.divide(relax.op.add(low_y, high_y), two)
    # The crop's frame turns back by the rotation: cos(-r), sin(-r).
    back_cos, back_sin = relax.op.cos(relax.op.negative(rotation)), \
        relax.op.sin(relax.op.negative(rotation))
    centre_x = relax.op.subtract(relax.op.multiply(back_cos, mid_x),
                                 relax.op.multiply(back_sin, mid_y))
    centre_y = relax.op.add(relax.op.multiply(back_sin, mid_x), relax.op.multiply(back_cos, mid_y))
    width, height = options["output_width"], options["output_height"]
    scale_x = relax.op.divide(relax.op.multiply(_scalar(options["scale_x"]),
                                                relax.op.subtract(high_x, low_x)), _scalar(width))
    scale_y = relax.op.divide(relax.op.multiply(_scalar(options["scale_y"]),
                                                relax.op.subtract(high_y, low_y)), _scalar(height))
    # shift(centre) . rotate(-r) . scale . shift(-size / 2), rows 0 and 1.
    m00, m01 = relax.op.multiply(back_cos, scale_x), \
        relax.op.negative(relax.op.multiply(back_sin, scale_y))
    m10, m11 = relax.op.multiply(back_sin, scale_x), relax.op.multiply(back_cos, scale_y)
    shift_x, shift_y = _scalar(-(width / 2.0)), _scalar(-(height / 2.0))

    def translation(a, b, centre):
        return relax.op.add(relax.op.add(relax.op.multiply(a, shift_x),
                                         relax.op.multiply(b, shift_y)), centre)

    zero, one = _scalar(0.0), _scalar(1.0)
    entries = [m00, m01, zero, translation(m00, m01, centre_x),
               m10, m11, zero, translation(m10, m11, centre_y),
               zero, zero, one, zero,
               zero, zero, zero, one]
    return relax.op.reshape(relax.op.concat(entries, axis=1), (1, 4, 4))


def _bilinear_crop(data: te.Tensor, x_row: te.Tensor, y_row: te.Tensor,
                   size: tuple[int, int]) -> te.Tensor:
    """MediaPipe's TransformTensorBilinear loops: output pixel (x, y) samples
    ``data`` at (x_row . (x, y, 0, 1), y_row . (x, y, 0, 1)), the rows'
    translations moved to pixel centres."""
    _, height, width, channels = (int(d) for d in data.shape)

    def row(matrix_row):
        m0, m1, m2, m3 = (matrix_row[0, i] for i in range(4))
        return m0, m1, m2, m3 + m0 * 0.5 + m1 * 0.5 - 0.5

    def sample(n, out_y, out_x, channel):
        coord = (out_x.astype("float32"), out_y.astype("float32"), tirx.const(0.0, "float32"),
                 tirx.const(1.0, "float32"))
        at_x, at_y = (sum((m * c for m, c in zip(row(r), coord)), tirx.const(0.0, "float32"))
                      for r in (x_row, y_row))
        inside = tirx.all(at_x >= 0.0, at_x <= width - 1.0, at_y >= 0.0, at_y <= height - 1.0)
        floor_x, floor_y = tirx.floor(at_x), tirx.floor(at_y)
        left = tirx.max(tirx.min(floor_x.astype("int32"), width - 1), 0)
        top = tirx.max(tirx.min(floor_y.astype("int32"), height - 1), 0)

        def read(y, x):  # MediaPipe reads 0 past the map's last row / column
            return tirx.if_then_else(tirx.all(y < height, x < width),
                                     data[n, tirx.min(y, height - 1), tirx.min(x, width - 1),
                                          channel], tirx.const(0.0, "float32"))

        right, lower = at_x - floor_x, at_y - floor_y
        upper_row = (1.0 - right) * read(top, left) + right * read(top, left + 1)
        lower_row = (1.0 - right) * read(top + 1, left) + right * read(top + 1, left + 1)
        value = lower * lower_row + (1.0 - lower) * upper_row
        return tirx.if_then_else(inside, value, tirx.const(0.0, "float32"))

    return te.compute((1, *size, channels), sample, name="transform_tensor_bilinear")


def transform_tensor_bilinear(converter, op) -> relax.Expr:
    """``TransformTensorBilinear`` (version 2): a gather, as a TE compute."""
    _require_version_2(converter, op)
    (data, matrix), (output,) = converter.get_input_tensors(op), converter.get_output_tensors(op)
    shape, matrix_shape, out_shape = _float32_shapes(converter, (data, matrix, output))
    options = _flexbuffer_options(op, {"output_height": int, "output_width": int})
    size = (options["output_height"], options["output_width"])
    if len(shape) != 4 or shape[0] != 1 or matrix_shape != (1, 4, 4) or \
            out_shape != (1, *size, shape[3]):
        raise ValueError(f"data {shape}, matrix {matrix_shape} into {out_shape}; expected "
                         f"(1, h, w, c), (1, 4, 4) into (1, {size[0]}, {size[1]}, c)")
    x_row, y_row = _matrix_rows(converter, matrix)
    return converter.bb.call_te(_bilinear_crop, converter.get_tensor_expr(data), x_row, y_row,
                                size, primfunc_name_hint="transform_tensor_bilinear")


def _transformed_landmarks(landmarks: te.Tensor, x_row: te.Tensor, y_row: te.Tensor) -> te.Tensor:
    def coordinate(n, landmark, axis):
        point = (landmarks[n, landmark, 0], landmarks[n, landmark, 1],
                 tirx.const(0.0, "float32"), tirx.const(1.0, "float32"))

        def dot(row):
            return sum((row[0, i] * point[i] for i in range(4)), tirx.const(0.0, "float32"))

        kept = landmarks[n, landmark, tirx.min(axis, landmarks.shape[2] - 1)]
        return tirx.Select(axis == 0, dot(x_row), tirx.Select(axis == 1, dot(y_row), kept))

    return te.compute(landmarks.shape, coordinate, name="transform_landmarks")


def transform_landmarks(converter, op) -> relax.Expr:
    """``TransformLandmarks`` (version 2), as a TE compute."""
    _require_version_2(converter, op)
    (landmarks, matrix), (output,) = converter.get_input_tensors(op), \
        converter.get_output_tensors(op)
    shape, matrix_shape, out_shape = _float32_shapes(converter, (landmarks, matrix, output))
    if len(shape) != 3 or shape[0] != 1 or shape[2] not in (2, 3) or \
            matrix_shape != (1, 4, 4) or out_shape != shape:
        raise ValueError(f"landmarks {shape}, matrix {matrix_shape} into {out_shape}; expected "
                         "(1, n, 2 or 3), (1, 4, 4) into the landmarks' shape")
    x_row, y_row = _matrix_rows(converter, matrix)
    return converter.bb.call_te(_transformed_landmarks, converter.get_tensor_expr(landmarks),
                                x_row, y_row, primfunc_name_hint="transform_landmarks")


# MediaPipe's custom operators texscope converts: name -> converter(converter, op).
CONVERTERS = {
    TRANSPOSE_CONV_BIAS: transpose_conv_bias,
    LANDMARKS_TO_TRANSFORM_MATRIX: landmarks_to_transform_matrix,
    TRANSFORM_TENSOR_BILINEAR: transform_tensor_bilinear,
    TRANSFORM_LANDMARKS: transform_landmarks,
}
