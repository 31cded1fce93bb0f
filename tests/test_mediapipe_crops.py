"""face_landmark_with_attention's custom operators (Landmarks2TransformMatrix,
TransformTensorBilinear, TransformLandmarks) compute what MediaPipe's kernels
compute, on the CPU and on OpenCL; files they cannot be read from are errors
naming the operator."""

import importlib.util
import subprocess

import numpy as np
import pytest
from flatbuffers import flexbuffers

import texscope
from texscope import opencl
from texscope.backend.lowering import kernel_names
from texscope.diagnostics import verify
from texscope.errors import TexscopeError
from texscope.frontend.tflite_model import load_tflite

from modules import mediapipe_loops, tiny_tflite
from test_tflite import _written

# face_landmark_with_attention's lips crop but for the sizes: an odd subset
# (MediaPipe pairs its last index with itself) and a target rotation.
MATRIX_OPTIONS = {"left_rotation_idx": 3, "right_rotation_idx": 7, "output_height": 16,
                  "output_width": 12, "scale_x": 1.5, "scale_y": 1.25,
                  "subset_idxs": [0, 1, 2, 5, 8, 9, 3], "target_rotation_radians": 0.3}
DATA, CROP = (1, 20, 24, 8), (6, 7)
CROP_MATRICES = {
    # Scaled and sheared, every pixel inside the map.
    "inside": [[1.7, 0.6, 0, 2.2], [-0.5, 1.9, 0, 5.1]],
    # Half the crop beyond the map's left and bottom edges: those pixels are 0.
    "overhanging": [[3.0, 0.4, 0.7, -6.0], [0.2, 3.5, 0, 4.0]],
    # The last column and row land exactly on the map's last (x = 23, y = 19):
    # their right and lower neighbours, past the map, are read as 0.
    "on_the_edge": [[1.0, 0, 0, 17.0], [0, 1.0, 0, 14.0]],
}


def _matrix(rows) -> np.ndarray:
    return np.array([[*rows, [0, 0, 1, 0], [0, 0, 0, 1]]], "float32")


def _matrix_model(tmp_path, options=MATRIX_OPTIONS, landmarks=10, version=2):
    return _written(tmp_path, "matrix.tflite", tiny_tflite.mediapipe_custom(
        "Landmarks2TransformMatrix", [("landmarks", (1, landmarks, 3))], ("matrix", (1, 4, 4)),
        bytes(flexbuffers.Dumps(options)), version))


def _crop_model(tmp_path, options=None, out_shape=(1, *CROP, DATA[3]), version=2):
    options = {"output_height": CROP[0], "output_width": CROP[1]} if options is None else options
    return _written(tmp_path, "crop.tflite", tiny_tflite.mediapipe_custom(
        "TransformTensorBilinear", [("data", DATA), ("matrix", (1, 4, 4))], ("crop", out_shape),
        bytes(flexbuffers.Dumps(options)), version))


def _landmarks_model(tmp_path, coordinates=2, version=2):
    shape = (1, 9, coordinates)
    return _written(tmp_path, "landmarks.tflite", tiny_tflite.mediapipe_custom(
        "TransformLandmarks", [("landmarks", shape), ("matrix", (1, 4, 4))],
        ("mapped", shape), None, version))


def _check(path, inputs, expected):
    """The import on the CPU (to float32 rounding) and texscope's build on
    OpenCL against MediaPipe's loops."""
    mod = load_tflite(path)
    (cpu,) = verify.reference_outputs(mod, inputs)
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(cpu, expected, rtol=1e-6, atol=1e-6 * scale)
    run = opencl.run(texscope.build(mod, "adreno-opencl"), inputs)
    check = verify.compare(run.outputs, [expected], rtol=0, atol=1e-5, of_scale=True)
    assert check.ok and run.copies == 0, check


def test_landmarks_to_transform_matrix_computes_mediapipes_matrix(tmp_path):
    landmarks = np.random.default_rng(0).uniform(0, 192, (1, 10, 3)).astype("float32")
    expected = mediapipe_loops.landmarks_to_transform_matrix(landmarks, MATRIX_OPTIONS)
    assert not np.allclose(expected[0, :2, :2], np.diag(np.diag(expected[0, :2, :2])))  # turned
    _check(_matrix_model(tmp_path), [landmarks], expected)


@pytest.mark.parametrize("case", sorted(CROP_MATRICES))
def test_transform_tensor_bilinear_samples_as_mediapipe_does(tmp_path, case):
    data = np.random.default_rng(1).standard_normal(DATA).astype("float32")
    matrix = _matrix(CROP_MATRICES[case])
    expected = mediapipe_loops.transform_tensor_bilinear(data, matrix, CROP)
    outside = int((expected == 0).all(axis=-1).sum())
    assert (outside > 0) == (case == "overhanging")
    _check(_crop_model(tmp_path), [data, matrix], expected)


@pytest.mark.parametrize("coordinates", [2, 3])
def test_transform_landmarks_maps_x_and_y_and_keeps_z(tmp_path, coordinates):
    landmarks = np.random.default_rng(2).uniform(0, 16, (1, 9, coordinates)).astype("float32")
    matrix = _matrix(CROP_MATRICES["overhanging"])
    expected = mediapipe_loops.transform_landmarks(landmarks, matrix)
    _check(_landmarks_model(tmp_path, coordinates), [landmarks, matrix], expected)


@pytest.mark.parametrize("model, named", [
    (lambda p: _landmarks_model(p, version=1),
     "TransformLandmarks \\(output mapped\\): ValueError: version 1 of the operator; "
     "texscope converts version 2"),
    (lambda p: _crop_model(p, options={"output_height": 6}),
     "TransformTensorBilinear \\(output crop\\): ValueError: options lack output_width"),
    (lambda p: _crop_model(p, options={"output_height": 6, "output_width": "7"}),
     "ValueError: option output_width = '7', expected int"),
    (lambda p: _crop_model(p, out_shape=(1, 6, 6, 8)),
     "ValueError: data \\(1, 20, 24, 8\\), matrix \\(1, 4, 4\\) into \\(1, 6, 6, 8\\); "
     "expected \\(1, h, w, c\\), \\(1, 4, 4\\) into \\(1, 6, 7, c\\)"),
    (lambda p: _matrix_model(p, landmarks=8),
     "Landmarks2TransformMatrix \\(output matrix\\): ValueError: landmark indices "
     "\\[3, 7, 0, 1, 2, 5, 8, 9, 3\\] outside the 8 landmarks"),
    (lambda p: _matrix_model(p, options=[1, 2]),
     "ValueError: options are not a FlexBuffer map"),
])
def test_an_operator_the_converter_cannot_read_is_an_error_naming_it(tmp_path, model, named):
    path = model(tmp_path)
    with pytest.raises(TexscopeError, match=f"^{path}: TVM's TFLite frontend failed on operator "
                       f".*{named}"):
        load_tflite(path)


def test_the_matrix_fuses_into_a_kernel_whose_long_name_is_shortened(tmp_path):
    """33 operators computing the matrix fuse into one PrimFunc named after
    all of them (337 characters; PoCL aborts the process on such a kernel
    name): the build names it by its start and a digest."""
    result = texscope.build(load_tflite(_matrix_model(tmp_path)), "adreno-opencl")
    names = sorted(gvar.name_hint for gvar in result.module.functions)
    assert max(map(len, names)) <= kernel_names.LONGEST
    assert ("fused_tir_negative_tir_cos_subtract3_multiply1_divide_multiply1_tir_sin_subtract3_"
            "multiply1_divide_multiply1_3188d62d") in names


def test_the_run_command_says_tflite_cannot_run_the_operators(tmp_path):
    """TFLite's interpreter has no kernel for them: the run compares with the
    CPU and says why it did not compare with TFLite."""
    if importlib.util.find_spec("ai_edge_litert") is None:
        pytest.skip("without TFLite's interpreter the run does not try it")
    path = _landmarks_model(tmp_path)
    done = subprocess.run(["texscope", "run", str(path)], capture_output=True, text=True,
                          check=False, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert ("against TFLite's interpreter: not compared (TFLite's interpreter cannot run "
            "landmarks.tflite: Encountered unresolved custom op: TransformLandmarks.)") in lines
    assert any(line.startswith("against the CPU (llvm): ") and line.endswith("-> OK")
               for line in lines)
