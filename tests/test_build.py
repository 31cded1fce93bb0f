"""Building for Adreno: real OpenCL that compiles on PoCL and uses images properly."""

import json

import pytest
import tvm

import texscope
from texscope import opencl
from texscope.models import zoo
from texscope.backend.build import build, kernel_signatures

NETWORKS = ["seed", "resnet", "mobilenet_v2", "unet", "inception"]


@pytest.fixture(scope="module")
def builds():
    return {name: build(zoo.NETWORKS[name](), "adreno-opencl") for name in NETWORKS}


@pytest.mark.parametrize("name", NETWORKS)
def test_kernels_compile_on_a_real_opencl_and_read_images_properly(builds, name):
    result = builds[name]
    program = opencl.compile_source(result.opencl_source)
    kernels = kernel_signatures(result.opencl_source)
    assert sorted(k.function_name for k in program.all_kernels()) == sorted(kernels)
    assert result.report.build["kernels"] == len(kernels)
    assert result.report.build["kernels_with_images"] > 0
    assert opencl.image_misuse(result.opencl_source) == []


def test_the_seed_builds_four_kernels_and_the_conv_reads_an_image(builds):
    kernels = kernel_signatures(builds["seed"].opencl_source)
    # pack x, pack w, conv2d, unpack the result
    assert len(kernels) == 4
    (conv,) = [params for name, params in kernels.items() if "conv2d" in name]
    assert "__read_only image2d_array_t" in conv


# Kernels and copies left per network (upstream's build: 16 / 16 copies on
# resnet, a crash on mobilenet_v2, 23 / 0 on unet, 12 / 3 on inception).
# Fewer kernels come from the gather legalization of layout transforms (they
# fuse), fewer copies from pools writing textures and from unpacking straight
# from a texture where the alternative is a copy (inception: the softmax's
# unpack reads the shared conv's texture, at the price of one more unpack
# kernel for that storage signature).  mobilenet_v2's ReLU6 clips fuse into
# their convs as a maximum and a minimum (22 kernels when each clip unpacked,
# clipped and repacked in a kernel of its own).
EXPECTED = {"resnet": (17, 0), "mobilenet_v2": (18, 0), "unet": (21, 0), "inception": (11, 0)}


@pytest.mark.parametrize("name", EXPECTED)
def test_each_network_builds_its_kernels_with_the_copies_it_needs(builds, name):
    figures = builds[name].report.build
    assert (figures["kernels"], figures["copies_left"]) == EXPECTED[name]


def test_the_stock_tir_pipeline_emits_invalid_opencl():
    """What texscope's TIR pipeline fixes: upstream's default build."""
    target = tvm.target.Target("qcom/adreno-opencl-texture", host="llvm")
    executable = tvm.compile(
        texscope.models.examples.Seed, target=target,
        relax_pipeline=tvm.relax.backend.adreno.get_default_pipeline(target),
    )
    from texscope.backend.build import _device_source

    source = _device_source(executable)
    assert any("vload4" in p or "vstore4" in p for p in opencl.image_misuse(source))
    with pytest.raises(Exception):
        opencl.compile_source(source)


def test_depthwise_networks_build(builds):
    # Upstream's Adreno legalization divides by zero on depthwise conv2d.
    assert builds["mobilenet_v2"].report.build["kernels"] > 0


def test_export_writes_the_artifacts(builds, tmp_path):
    out = builds["seed"].export(tmp_path)
    assert sorted(p.name for p in out.iterdir()) == [
        ".texscope-manifest.json", "kernels.cl", "model.so", "plan.json", "report.html",
        "report.json", "report.md", "report.svg"]
    report = json.loads((out / "report.json").read_text())
    assert report["summary"]["kernels"] == 4
    assert {t["name"]: t["scope"] for t in report["tensors"]}["x_layout_transform"] == "global.texture-nhwc"
    # Loading it needs TVM's OpenCL runtime, which this wheel leaves out.
    assert (out / "model.so").read_bytes()[:4] == b"\x7fELF"


def test_vulkan_annotates_and_says_why_it_cannot_compile():
    result = build(texscope.models.examples.Seed, "adreno-vulkan")
    assert result.executable is None
    assert "no vulkan code generator" in result.report.build["codegen"]
    assert result.report.counts() == {
        "global": 4, "global.texture-nhwc": 1, "global.texture-weight": 1}


def test_get_default_pipeline_works_with_tvm_compile():
    target = tvm.target.Target("qcom/adreno-opencl-texture", host="llvm")
    executable = tvm.compile(texscope.models.examples.Seed, target=target,
                             relax_pipeline=texscope.get_default_pipeline(target),
                             tir_pipeline="texscope_adreno")
    from texscope.backend.build import _device_source

    assert opencl.image_misuse(_device_source(executable)) == []
