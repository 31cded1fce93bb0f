"""Texture limits, flavours and presets."""

import pytest

import texscope
from conftest import ADRENO, TINY, VULKAN
from texscope.knowledge.targets import ADRENO as ADRENO_PRESET
from texscope.knowledge.targets import MALI


@pytest.mark.parametrize(
    ("shape", "scope"),
    [
        ((8, 64, 3, 3, 4), "global.texture-weight"),  # 8 rows of 576 texels
        ((2, 16, 56, 56, 4), "global.texture-nhwc"),  # 16*56*56 texels is too wide for a row
        ((1, 16, 256, 256, 4), "global.texture"),  # 256*256 texels is too wide for a row
        ((4, 1024, 256, 256, 4), None),  # and 4096 layers exceed the depth limit
        ((64,), None),
        ((1, 64, 56, 56), None),
        ((1, 16, 56, 56, 8), None),
        (None, None),
    ],
)
def test_the_first_flavour_that_fits_is_chosen(shape, scope):
    assert texscope.texture_target(ADRENO).fit(shape, "float32").scope == scope


def test_limits_are_inclusive():
    tiny = texscope.texture_target(TINY)
    assert tiny.fit((1, 1, 1, 64, 4), "float32").scope == "global.texture-weight"
    assert tiny.fit((65, 1, 1, 65, 4), "float32").scope is None


def test_only_float_texels():
    target = texscope.texture_target(ADRENO)
    assert target.fit((1, 2, 8, 8, 4), "float16").scope is not None
    fit = target.fit((1, 2, 8, 8, 4), "int8")
    assert fit.scope is None and "int8" in fit.reason


def test_limits_come_from_target_attributes_else_the_preset():
    assert (texscope.texture_target(TINY).spatial_limit, texscope.texture_target(TINY).depth_limit) == (64, 16)
    vulkan = texscope.texture_target(VULKAN)
    assert vulkan.kind == "vulkan"
    assert (vulkan.spatial_limit, vulkan.depth_limit) == (ADRENO_PRESET.spatial_limit, ADRENO_PRESET.depth_limit)
    mali = texscope.texture_target("mali-opencl")
    assert mali.preset.name == "mali" and mali.spatial_limit == MALI.spatial_limit


def test_a_shape_that_fits_mali_but_not_adreno():
    shape = (1, 1, 20000, 20000, 4)
    assert texscope.texture_target(ADRENO).fit(shape, "float32").scope is None
    mali = texscope.texture_target("mali-opencl")
    assert mali.fit(shape, "float32").scope == "global.texture"


def test_the_host_is_llvm_at_opt_level_0_unless_one_is_named():
    import tvm
    from texscope.knowledge.targets import host_target, make_target

    device = make_target("adreno-opencl")
    assert host_target(None, device).export()["opt-level"] == 0
    assert host_target(None, device).kind.name == "llvm"
    assert "opt-level" not in host_target("llvm", device).export()
    carried = tvm.target.Target(device, host={"kind": "llvm", "opt-level": 2})
    assert host_target(None, carried).export()["opt-level"] == 2
    with pytest.raises(texscope.TexscopeError, match="unknown target"):
        host_target("no-such-kind", device)


def test_the_nvidia_preset_keeps_feature_maps_2d_and_weights_as_rows():
    nvidia = texscope.texture_target("nvidia-opencl")
    assert nvidia.preset.name == "nvidia" and nvidia.spatial_limit == 32768
    assert nvidia.preset.depthwise_padding_in_registers
    assert nvidia.fit((1, 2, 4, 4, 4), "float32").scope == "global.texture"
    assert nvidia.fit((1, 2, 4, 4, 4), "float32", weight=True).scope == "global.texture-weight"
    assert nvidia.fit((8, 64, 3, 3, 4), "float32").scope == "global.texture-weight"
    adreno = texscope.texture_target(ADRENO)
    assert adreno.fit((1, 2, 4, 4, 4), "float32").scope == "global.texture-weight"
    assert not adreno.preset.depthwise_padding_in_registers
