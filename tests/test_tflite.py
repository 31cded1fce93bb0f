"""TFLite input: MediaPipe's published models import, or fail naming the operator;
convs of any layout, channel count and groups pack."""

import importlib.util
import itertools
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

import texscope
from texscope import opencl
from texscope.diagnostics import verify
from texscope.cli import load_model, main
from texscope.errors import TexscopeError
from texscope.ir.graph import relax_bindings
from texscope.rewrites.broadcast_rank import ExpandBroadcastRank
from texscope.opencl.source import kernel_signatures
from texscope.frontend.tflite_model import _rewrite_flattened_prelu, failure_reason, load_tflite

from conftest import run_pass
from modules import odd_convs, tiny_tflite

IMPORTABLE = [
    "face_detection_full_range_sparse", "face_detection_short_range", "face_landmark",
    "face_landmark_with_attention", "hand_landmark_full", "hand_landmark_lite", "hand_recrop",
    "iris_landmark", "palm_detection_full", "palm_detection_lite", "pose_detection",
    "pose_landmark_full", "selfie_segmentation", "selfie_segmentation_landscape",
]
# Their weights are sparse float16 tensors that DENSIFY expands.
SPARSE = ["face_detection_full_range_sparse", "pose_detection"]
# TFLite's interpreter has no kernel for MediaPipe's operators in these
# (tests/test_mediapipe_crops.py checks them against MediaPipe's loops).
NO_TFLITE_KERNELS = {"face_landmark_with_attention": "Landmarks2TransformMatrix"}


def test_every_model_of_the_corpus_imports(mediapipe):
    assert sorted(IMPORTABLE) == sorted(mediapipe)


@pytest.mark.parametrize("name", IMPORTABLE)
def test_a_mediapipe_model_imports_with_its_nhwc_input(mediapipe, name):
    mod = load_model(str(mediapipe[name]))
    (image,) = mod["main"].params
    batch, height, width, channels = (int(d) for d in image.ty.shape.values)
    # Square images but the landscape segmentation's 256 x 144.
    assert (batch, channels) == (1, 3) and (height == width or (height, width) == (144, 256))


def _written(directory, name: str, flatbuffer: bytes):
    path = directory / name
    path.write_bytes(flatbuffer)
    return path


@pytest.fixture
def unconverted_custom(tmp_path):
    """A model of a MediaPipe custom operator nothing converts (the
    max-pool-with-argmax of its older segmentation models)."""
    return _written(tmp_path, "argmax.tflite", tiny_tflite.mediapipe_custom(
        "MaxPoolingWithArgmax2D", [("x", (1, 8, 8, 4))], ("y", (1, 4, 4, 4)), b"", version=1))


def test_a_model_the_frontend_cannot_read_is_an_error_naming_the_operator(unconverted_custom):
    with pytest.raises(TexscopeError, match=f"^{unconverted_custom}: TVM's TFLite frontend "
                       "does not convert custom operators: MaxPoolingWithArgmax2D \\(x1\\)$"):
        load_tflite(unconverted_custom)


@pytest.fixture
def failing_half_way(tmp_path):
    """A model whose conversion TVM's frontend gives up half-way through."""
    return _written(tmp_path, "dequantized_input.tflite", tiny_tflite.float16_input_dequantized())


def test_a_converter_failing_half_way_is_an_error_naming_the_operator(failing_half_way):
    with pytest.raises(TexscopeError, match=f"^{failing_half_way}: TVM's TFLite frontend failed on "
                       "operator DEQUANTIZE \\(output y\\): TypeError: ") as failed:
        load_tflite(failing_half_way)
    # The frontend's own error stays the cause, without the traceback whose
    # frames hold the frontend's half-built module.
    assert isinstance(failed.value.__cause__, TypeError)
    assert failed.value.__cause__.__traceback__ is None


def _mediapipe_transpose_conv_bias(image, weights, bias, stride, pad_before, out_size):
    """MediaPipe's kernel as it is written (transpose_conv_bias.cc): the
    bias, then each input pixel times the kernel added where it lands."""
    (stride_h, stride_w), (top, left) = stride, pad_before
    out = np.broadcast_to(bias, (1, *out_size, bias.size)).copy()
    _, height, width, _ = image.shape
    _, kernel_h, kernel_w, _ = weights.shape
    for in_y, in_x, ky, kx in itertools.product(range(height), range(width), range(kernel_h),
                                                range(kernel_w)):
        y, x = in_y * stride_h - top + ky, in_x * stride_w - left + kx
        if 0 <= y < out_size[0] and 0 <= x < out_size[1]:
            out[0, y, x] += weights[:, ky, kx, :] @ image[0, in_y, in_x]
    return out


# (height, width, channels in, out, kernel, strides, padding (1 SAME, 2 VALID)),
# the rows and columns cropped before, the output's size.
TRANSPOSE_CONVS = [
    # selfie segmentation's head: an exact 2x upsampling.
    ((4, 4, 8, 1, (2, 2), (2, 2), 1), (0, 0), (8, 8)),
    # SAME cropping 2 rows (1 above) and 1 column (none left).
    ((5, 6, 3, 2, (3, 3), (2, 2), 1), (1, 0), (9, 12)),
    ((5, 3, 4, 3, (3, 2), (1, 2), 2), (0, 0), (7, 6)),
]


@pytest.mark.parametrize("case, cropped, out_size", TRANSPOSE_CONVS)
def test_mediapipes_transpose_conv_bias_computes_what_its_kernel_computes(
        tmp_path, case, cropped, out_size):
    """MediaPipe's custom operator against its own loops, and against
    TFLite's interpreter (its XNNPACK delegate implements the operator)."""
    height, width, channels, out_channels, kernel, strides, padding = case
    rng = np.random.default_rng(0)
    weights = rng.uniform(-1, 1, (out_channels, *kernel, channels)).astype("float32")
    bias = rng.uniform(-1, 1, (out_channels,)).astype("float32")
    options = struct.pack("<3i", padding, strides[1], strides[0])
    path = _written(tmp_path, "up.tflite", tiny_tflite.transpose_conv_bias(
        (height, width), channels, weights, bias, options, [1, *out_size, out_channels]))
    mod = load_tflite(path)
    inputs = verify.random_inputs(mod)
    (out,) = verify.reference_outputs(mod, inputs)
    expected = _mediapipe_transpose_conv_bias(inputs[0], weights, bias, strides, cropped, out_size)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    if importlib.util.find_spec("ai_edge_litert") is not None:
        (tflites,) = verify.tflite_outputs(path, inputs)
        np.testing.assert_allclose(tflites, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options, out_size, dtype, named", [
    (struct.pack("<3i", 0, 2, 2), (8, 8), "float32",
     "padding 0 \\(1 SAME or 2 VALID expected\\)"),
    (struct.pack("<2i", 1, 2), (8, 8), "float32", "expected 12 bytes of options"),
    (struct.pack("<3i", 1, 2, 2), (9, 9), "float32",
     "output of shape \\(9, 9, 1\\), where the operator makes \\(8, 8, 1\\)"),
    (struct.pack("<3i", 1, 2, 2), (8, 8), "float16",
     "MediaPipe's kernel is float32 only, found \\['float16', 'float32'\\]"),
])
def test_a_transpose_conv_bias_the_converter_cannot_read_is_an_error_naming_it(
        tmp_path, options, out_size, dtype, named):
    weights, bias = np.ones((1, 2, 2, 8), dtype), np.zeros((1,), dtype)
    path = _written(tmp_path, "up.tflite", tiny_tflite.transpose_conv_bias(
        (4, 4), 8, weights, bias, options, [1, *out_size, 1]))
    with pytest.raises(TexscopeError, match=f"^{path}: TVM's TFLite frontend failed on operator "
                       f"Convolution2DTransposeBias \\(output y\\): ValueError: {named}"):
        load_tflite(path)


# Error allowed, as a fraction of each output's largest magnitude.  Both
# tools sum float32 in their own order: a few ulps of the scale, but for
# pose_landmark_full, whose segmentation reaches 1315 after its deepest
# stack (TVM's CPU build against TFLite's: 2.2e-4 of that, 2.1e-5 of the
# landmarks' scale, as the packed build against TVM's in the README).
# The selfie segmentations end in a sigmoid of negative logits on such
# inputs (the largest output: 0.015, 5.5e-6 in landscape), about
# exp(logit): an error relative to the largest output is the logits'
# absolute error there (1.5e-5 on logits of -4 and -12, float32 summed in
# another order).
SCALE_TOLERANCE = 1e-5
SCALE_TOLERANCE_OF = {"pose_landmark_full": 3e-4, "selfie_segmentation": 3e-5,
                      "selfie_segmentation_landscape": 3e-5}


def _check_import_computes_what_tflite_computes(path):
    """The imported module, compiled for the CPU, against TFLite's own
    interpreter on one input in the [-1, 1] the models' images are scaled to."""
    pytest.importorskip("ai_edge_litert")
    mod = load_tflite(path)
    inputs = verify.random_inputs(mod)
    expected = verify.tflite_outputs(path, inputs)
    tolerance = SCALE_TOLERANCE_OF.get(Path(path).stem, SCALE_TOLERANCE)
    check = verify.compare(verify.reference_outputs(mod, inputs), expected,
                           rtol=0, atol=tolerance, of_scale=True)
    assert check.ok, check


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=() if name == SPARSE[0] else pytest.mark.real_models)
    for name in IMPORTABLE if name not in NO_TFLITE_KERNELS])
def test_an_import_computes_what_tflites_interpreter_computes(mediapipe, name):
    """The frontend and texscope's rewrites of its output (PReLU, shared
    weights, the sparse models' densified weights, on which TVM's DEQUANTIZE
    fails) keep the model's function."""
    _check_import_computes_what_tflite_computes(mediapipe[name])


@pytest.mark.parametrize("name", sorted(NO_TFLITE_KERNELS))
def test_tflites_interpreter_still_cannot_run_these_models(mediapipe, name):
    """Were it to run one, the test above should compare with it."""
    pytest.importorskip("ai_edge_litert")
    with pytest.raises(TexscopeError, match=f"TFLite's interpreter cannot run {name}.tflite: "
                       f"Encountered unresolved custom op: {NO_TFLITE_KERNELS[name]}"):
        verify.tflite_outputs(mediapipe[name], verify.random_inputs(load_tflite(mediapipe[name])))


def test_a_weight_that_operators_share_is_converted_once(mediapipe):
    """face_landmark's operators share weight tensors and the frontend emits
    the weight's astype once per use (17 more bindings): no two bindings of
    the loaded model compute the same call."""
    mod = load_tflite(mediapipe["face_landmark"])
    calls = [b.value for _, b in relax_bindings(mod) if isinstance(b.value, relax.Call)]
    repeated = Counter(tvm_ffi.structural_hash(call) for call in calls)
    assert len(calls) == 352 and max(repeated.values()) == 1


@pytest.mark.parametrize("model, named", [
    ("unconverted_custom", "MaxPoolingWithArgmax2D"),  # refused before the frontend runs
    # The frontend fails half-way: its BlockBuilder, freed later, warns from C++.
    ("failing_half_way", "failed on operator DEQUANTIZE"),
])
def test_the_command_prints_one_line_and_writes_nothing(request, tmp_path, model, named):
    path = request.getfixturevalue(model)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "texscope", "build", str(path),
         "-o", str(out)], capture_output=True, text=True, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("texscope: error: ") and named in line
    assert not out.exists()


def test_a_file_that_is_not_tflite_is_an_error(tmp_path):
    bad = tmp_path / "model.tflite"
    bad.write_bytes(b"\x00" * 64)
    with pytest.raises(TexscopeError, match="model.tflite: not a TFLite flatbuffer"):
        load_model(str(bad))


def _conv_layouts(mod):
    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) \
                and expr.op.name == "relax.nn.conv2d":
            found.append((str(expr.attrs.data_layout), str(expr.attrs.kernel_layout),
                          int(expr.attrs.groups)))

    relax.analysis.post_order_visit(mod["main"], visit)
    return found


@pytest.mark.parametrize("name, packed", [
    ("NhwcStem", [("NCHW4c", "OIHW4o", 1)]),
    # 42 depthwise channels get two zero groups.
    ("OddChannels", [("NCHW4c", "OIHW4o", 1), ("NCHW4c", "OIHW4o", 44)]),
    # 3 groups of 6 -> 3 channels: one zero group makes 24 -> 12.
    ("Grouped", [("NCHW4c", "OIHW4o", 4)]),
    ("DepthwiseMultiplier", [("NCHW4c", "OIHW4o", 8)]),
])
def test_every_conv_packs_whatever_its_layout_channels_and_groups(name, packed):
    mod = getattr(odd_convs, name)
    target = texscope.texture_target("adreno-opencl").target
    with target:
        out = texscope.ConvertToPackedLayout(target)(mod)
    assert _conv_layouts(out) == packed
    check = verify.equivalent(mod, out, rtol=1e-5, atol=1e-5)
    assert check.ok, check


@pytest.mark.parametrize("name", ["NhwcStem", "OddChannels", "Grouped", "DepthwiseMultiplier"])
@pytest.mark.parametrize("target", ["adreno-opencl", "mali-opencl"])
def test_odd_convs_read_textures_and_compute_the_cpu_numbers_on_opencl(name, target):
    mod = getattr(odd_convs, name)
    result = texscope.build(mod, opencl.device_target(None, target))
    figures = result.report.build
    assert figures["convs_reading_texture"] == figures["convs"] == len(_conv_layouts(mod))
    inputs = verify.random_inputs(mod)
    run = opencl.run(result, inputs)
    assert run.copies == 0
    check = verify.compare(run.outputs, verify.reference_outputs(mod, inputs), rtol=1e-4, atol=1e-4)
    assert check.ok, check


def test_the_frontends_flattened_prelu_becomes_element_wise_in_its_own_shape():
    out = run_pass(_rewrite_flattened_prelu(), odd_convs.BiasPrelu)
    tvm.ir.assert_structural_equal(out, odd_convs.BiasPreluRewritten, map_free_vars=True)
    # Exactly the same function: one of max(x, 0) and min(x, 0) is zero.
    check = verify.equivalent(odd_convs.BiasPrelu, out, rtol=0, atol=0)
    assert check.ok, check


def test_a_lower_rank_operand_is_reshaped_to_the_full_rank():
    out = run_pass(ExpandBroadcastRank(), odd_convs.BiasPreluRewritten)
    tvm.ir.assert_structural_equal(out, odd_convs.BiasPreluRanked, map_free_vars=True)
    # Nothing left to expand: the module comes back unchanged.
    tvm.ir.assert_structural_equal(run_pass(ExpandBroadcastRank(), out), out)


def test_a_bias_and_prelu_stay_packed_and_fuse_into_the_conv_on_opencl():
    # Before ExpandBroadcastRank the 1-D bias unpacked the conv's output and
    # the next step packed it again.  TVM's Adreno conv schedule leaves the
    # blocks reading the conv's result twice (max and min) off GPU threads:
    # the build crashed in LLVM codegen on a texture load (face_landmark, in
    # a TexscopeError on its texture store); texscope's EpilogueConv2d inlines
    # them.
    mod = odd_convs.BiasPreluRewritten
    result = texscope.build(mod, opencl.device_target(None, "adreno-opencl"))
    assert result.report.build["convs_reading_texture"] == 1
    # One fused function (its data pad and its conv kernel), besides the packing.
    (fused,) = {k.rsplit("_kernel", 1)[0] for k in kernel_signatures(result.opencl_source)
                if "layout_transform" not in k}
    assert fused == "fused_conv2d_NCHWc_OIHWo_opencl_add_maximum_minimum_multiply_add1"
    inputs = verify.random_inputs(mod)
    run = opencl.run(result, inputs)
    check = verify.compare(run.outputs, verify.reference_outputs(mod, inputs), rtol=1e-4, atol=1e-4)
    assert check.ok and run.copies == 0, check


@pytest.mark.parametrize("bench", ["build_speed.py", "memory.py"])
def test_the_benches_say_why_a_model_is_skipped(unconverted_custom, bench):
    """A model TVM's frontend cannot read (given by its path) is a row with
    the reason, not the file's path cut short."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "bench" / bench), str(unconverted_custom)],
                          capture_output=True, text=True, check=True, cwd=root)
    (row,) = [line for line in done.stdout.splitlines() if line.startswith("argmax")]
    assert ("skipped: TexscopeError: TVM's TFLite frontend does not convert custom operators: "
            "MaxPoolingWithArgmax2D (x1)") in row


def test_the_failure_reason_leaves_out_the_file(tmp_path):
    bad = tmp_path / "dir.tflite" / "model.tflite"
    bad.parent.mkdir()
    bad.write_bytes(b"\0" * 16)
    with pytest.raises(texscope.TexscopeError) as caught:
        load_tflite(bad)
    assert str(caught.value).startswith(f"{bad}: ")
    assert failure_reason(caught.value) == "not a TFLite flatbuffer (no TFL3 identifier)"


def test_comparing_with_tflite_without_its_interpreter_says_what_to_install(monkeypatch, tmp_path):
    for module in ("ai_edge_litert", "ai_edge_litert.interpreter"):
        monkeypatch.setitem(sys.modules, module, None)  # importing it fails
    with pytest.raises(TexscopeError, match="pip install ai-edge-litert"):
        verify.tflite_outputs(tmp_path / "model.tflite", [])


@pytest.fixture
def relu_tflite(tmp_path):
    return _written(tmp_path, "relu.tflite", tiny_tflite.relu())


def test_the_run_command_compares_a_tflite_model_with_tflites_interpreter(relu_tflite):
    pytest.importorskip("ai_edge_litert")
    done = subprocess.run(["texscope", "run", str(relu_tflite)], capture_output=True, text=True,
                          check=False, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for reference in ("the CPU (llvm)", "TFLite's interpreter"):
        assert (f"against {reference}: max abs error 0 (0 of its output's largest magnitude), "
                "max rel error 0 -> OK") in lines
    assert done.stderr == ""  # without TFLite's line announcing its CPU delegate


def test_without_tflites_interpreter_the_run_says_it_did_not_compare(relu_tflite, monkeypatch,
                                                                     capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: None if name == "ai_edge_litert"
                        else find_spec(name, *rest))
    assert main(["run", str(relu_tflite)]) == 0
    assert ("against TFLite's interpreter: not compared (pip install ai-edge-litert)"
            in capsys.readouterr().out.splitlines())


@pytest.mark.real_models
def test_the_run_command_matches_pose_landmark_full_at_its_default_tolerance(mediapipe):
    """Its segmentation reaches 1315 and float32 summed in other orders
    moves it by 0.14 (CPU) and 0.26 (TFLite): 1e-4 and 2e-4 of that."""
    done = subprocess.run(["texscope", "run", str(mediapipe["pose_landmark_full"])],
                          capture_output=True, text=True, check=False, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    checks = [line for line in done.stdout.splitlines() if line.startswith("against ")]
    assert len(checks) == 2 and all(line.endswith("-> OK") for line in checks)
