"""MediaPipe's published models, built by texscope for Adreno and Mali and run
on OpenCL (PoCL in CI) against the CPU.

``python -m pytest -m real_models`` builds every model that imports for both
targets (adreno-opencl and mali-opencl, each run on OpenCL against the CPU),
and each in float16.  The default run runs a part of it (marked
``default_run``): face_detection_short_range (an RGB 5x5 stem, convs of 36
and 42 channels, depthwise and strided convs, pads, pools, a concat) for both
targets and hand_recrop in float16.
"""

import itertools
from pathlib import Path
import subprocess
import sys

import numpy as np
import pytest
import tvm
from tvm import relax

import texscope
from texscope.knowledge.targets import is_texture_scope
from texscope import opencl
from texscope.knowledge import registry
from texscope.diagnostics import verify
from texscope.frontend.tflite_model import load_tflite
from tflite import Model

from test_tflite import IMPORTABLE

TARGETS = ("adreno-opencl", "mali-opencl")
FAST = "face_detection_short_range"
FAST_FLOAT16 = "hand_recrop"


def _marks(name: str, fast: str) -> tuple:
    """Every case is under the real_models marker; the fast one runs by default too."""
    return (pytest.mark.real_models, *((pytest.mark.default_run,) if name == fast else ()))


def _cases(fast):
    return [pytest.param(name, target, marks=_marks(name, fast), id=f"{name}-{target}")
            for name in IMPORTABLE for target in TARGETS]


def _marked(marker: str) -> list[tuple]:
    return [tuple(case.values) for case in _cases(FAST)
            if any(mark.name == marker for mark in case.marks)]


def test_the_marker_covers_every_importable_model_on_every_target():
    assert sorted(_marked("real_models")) == sorted(itertools.product(IMPORTABLE, TARGETS))
    assert _marked("default_run") == [(FAST, target) for target in TARGETS]


def _operators(mod):
    found = set()

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            found.add(expr.op.name)

    relax.analysis.post_order_visit(mod["main"], visit)
    return found


def test_every_operator_of_every_importable_model_has_a_registry_entry(mediapipe):
    with_entries = {e.key.op for e in registry.entries() if isinstance(e.key, registry.OpKey)}
    # Pools are described by the block tags of their legalizations.
    with_entries |= {op for e in registry.entries() if isinstance(e.key, registry.ScheduleRuleKey)
                     for op in e.key.ops}
    used = set().union(*(_operators(load_tflite(mediapipe[name])) for name in IMPORTABLE))
    # The import's own TE computes (MediaPipe's crops) are matched by their
    # PrimFuncs' patterns, an injective one or the opaque fallback.
    assert used - with_entries == {"relax.call_tir"}
    # What MediaPipe's models use, once texscope's import rewrote their PReLUs.
    assert {"relax.nn.conv2d", "relax.clip", "relax.image.resize2d", "relax.mean",
            "relax.matmul", "relax.sigmoid", "relax.astype", "relax.concat"} <= used


def _output_names(path) -> list[str]:
    graph = Model.GetRootAsModel(Path(path).read_bytes(), 0).Subgraphs(0)
    return [graph.Tensors(graph.Outputs(i)).Name().decode() for i in range(graph.OutputsLength())]


def _convs_reading_means(report) -> int:
    """Convs whose data is in a buffer, each because a mean made it or reads
    it too (selfie_segmentation_landscape's squeezes: TVM's GPU reductions,
    buffers in and out, faster than a global average pool of texels).  Any
    other conv must read a texture."""
    tensors = {(row.function, row.index): row for row in report.tensors}
    made_by, read_by = {}, {}
    for edge in report.edges:
        made_by[edge.function, edge.target] = edge.kernel
        read_by.setdefault((edge.function, edge.source), set()).add(edge.kernel)
    fed = [(edge.function, edge.source) for edge in report.edges if "conv2d" in edge.kernel
           and tensors[edge.function, edge.source].origin == "call"
           and not is_texture_scope(tensors[edge.function, edge.source].scope)]
    for data in fed:
        assert made_by[data] == "mean" or "mean" in read_by[data], tensors[data]
    return len(fed)


@pytest.mark.parametrize("name, target", _cases(FAST))
def test_a_model_packs_every_conv_builds_runs_and_matches_the_cpu(mediapipe, name, target):
    mod = load_tflite(mediapipe[name])
    result = texscope.build(mod, opencl.device_target(None, target))
    figures = result.report.build
    buffer_fed = _convs_reading_means(result.report)
    assert figures["convs"] > 0
    assert figures["convs_reading_texture"] == figures["convs"] - buffer_fed
    assert figures["copies_left"] == 0
    # The file's own output names, not the frontend's (lv41...).
    assert opencl.plan_of(result).outputs == tuple(_output_names(mediapipe[name]))
    inputs = verify.random_inputs(mod)
    run = opencl.run(result, inputs)
    assert run.copies == 0 and run.images > 0
    for actual, expected in zip(run.outputs, verify.reference_outputs(mod, inputs)):
        # Random inputs drive the published weights to outputs as large as
        # 1315 (pose_landmark_full's segmentation); summed in another order,
        # float32 differs there by up to 1e-4 of an output's largest magnitude.
        check = verify.compare([actual], [expected], rtol=1e-3,
                               atol=max(1e-3, 2e-4 * float(np.abs(expected).max())))
        assert check.ok, check


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=_marks(name, FAST_FLOAT16)) for name in IMPORTABLE])
def test_a_float16_build_compiles_half_texel_kernels(mediapipe, name):
    mod = relax.transform.ToMixedPrecision(out_dtype="float16")(load_tflite(mediapipe[name]))
    result = texscope.build(mod, "adreno-opencl")
    figures = result.report.build
    assert figures["convs_reading_texture"] == figures["convs"] and figures["copies_left"] == 0
    assert "write_imageh" in result.opencl_source
    assert opencl.image_misuse(result.opencl_source) == []
    device = opencl.default_device()
    if "cl_khr_fp16" in device.extensions:  # PoCL on a CPU has no half precision
        opencl.compile_source(result.opencl_source, device)


def test_the_command_builds_a_tflite_file(mediapipe, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "texscope", "build", str(mediapipe["hand_recrop"]),
         "--target", "mali-opencl", "-o", str(tmp_path / "out")],
        capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "copies: 0 planned (0 bytes), 0 left after fusion" in done.stdout
    assert {"model.so", "kernels.cl", "report.json"} <= {p.name for p in (tmp_path / "out").iterdir()}
