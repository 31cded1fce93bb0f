"""MediaPipe's custom operators of face_landmark_with_attention as its C++
kernels compute them (version 2 of ``landmarks_to_transform_matrix.cc``,
``transform_tensor_bilinear.cc`` and ``transform_landmarks.cc``): loops over
float32 scalars, each sum in the kernel's order, the reference the converted
operators are checked against (TFLite's interpreter has no kernel for them)."""

import math

import numpy as np

f32 = np.float32


def _dot(row, vector):
    total = f32(0)
    for a, b in zip(row, vector):
        total = f32(total + f32(a * b))
    return total


def _product(left, right):
    size = len(left)
    return [[_dot(left[r], [right[k][c] for k in range(size)]) for c in range(size)]
            for r in range(size)]


def landmarks_to_transform_matrix(landmarks, options: dict) -> np.ndarray:
    points = landmarks[0]
    left, right = points[options["left_rotation_idx"]], points[options["right_rotation_idx"]]
    angle = f32(math.atan2(f32(right[1] - left[1]), f32(right[0] - left[0])))
    rotation = f32(f32(options["target_rotation_radians"]) - angle)
    cos, sin = f32(math.cos(rotation)), f32(math.sin(rotation))
    turned = [(_dot((cos, -sin, 0), (p[0], p[1], 1)), _dot((sin, cos, 0), (p[0], p[1], 1)))
              for p in (points[i] for i in options["subset_idxs"])]
    xs, ys = [t[0] for t in turned], [t[1] for t in turned]
    mid = (f32(f32(min(xs) + max(xs)) / f32(2)), f32(f32(min(ys) + max(ys)) / f32(2)))
    back_cos, back_sin = f32(math.cos(-rotation)), f32(math.sin(-rotation))
    centre = (_dot((back_cos, -back_sin, 0), (*mid, 1)), _dot((back_sin, back_cos, 0), (*mid, 1)))
    width, height = options["output_width"], options["output_height"]
    scale_x = f32(f32(f32(options["scale_x"]) * f32(max(xs) - min(xs))) / f32(width))
    scale_y = f32(f32(f32(options["scale_y"]) * f32(max(ys) - min(ys))) / f32(height))
    steps = [
        [[1, 0, 0, centre[0]], [0, 1, 0, centre[1]], [0, 0, 1, 0], [0, 0, 0, 1]],
        [[back_cos, -back_sin, 0, 0], [back_sin, back_cos, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
        [[scale_x, 0, 0, 0], [0, scale_y, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
        [[1, 0, 0, f32(-(width / 2.0))], [0, 1, 0, f32(-(height / 2.0))], [0, 0, 1, 0],
         [0, 0, 0, 1]],
    ]
    matrix = [[f32(r == c) for c in range(4)] for r in range(4)]
    for step in steps:
        matrix = _product(matrix, [[f32(v) for v in row] for row in step])
    return np.array(matrix, "float32")[None]


def transform_tensor_bilinear(data, matrix, size: tuple[int, int]) -> np.ndarray:
    _, height, width, channels = data.shape
    m = matrix.reshape(16)
    # Align corners: the translations moved by half a pixel (in double, stored as float).
    x_row = (m[0], m[1], m[2], f32(m[3] + (m[0] * 0.5 + m[1] * 0.5 - 0.5)))
    y_row = (m[4], m[5], m[6], f32(m[7] + (m[4] * 0.5 + m[5] * 0.5 - 0.5)))
    out = np.zeros((1, *size, channels), "float32")

    def read(y, x):
        if y < 0 or x < 0 or y >= height or x >= width:
            return np.zeros(channels, "float32")
        return data[0, y, x]

    for out_y in range(size[0]):
        for out_x in range(size[1]):
            coord = (f32(out_x), f32(out_y), f32(0), f32(1))
            at_x, at_y = _dot(x_row, coord), _dot(y_row, coord)
            if at_x < 0 or at_x > width - 1 or at_y < 0 or at_y > height - 1:
                continue
            left, top = math.floor(at_x), math.floor(at_y)
            right, lower = f32(at_x - left), f32(at_y - top)
            upper_row = (f32(1) - right) * read(top, left) + right * read(top, left + 1)
            lower_row = (f32(1) - right) * read(top + 1, left) + right * read(top + 1, left + 1)
            out[0, out_y, out_x] = lower * lower_row + (f32(1) - lower) * upper_row
    return out


def transform_landmarks(landmarks, matrix) -> np.ndarray:
    m = matrix.reshape(16)
    out = landmarks.copy()
    for index in range(landmarks.shape[1]):
        point = (landmarks[0, index, 0], landmarks[0, index, 1], f32(0), f32(1))
        out[0, index, 0] = _dot(m[0:4], point)
        out[0, index, 1] = _dot(m[4:8], point)
    return out
