"""Random modules through the whole pipeline: well formed, invariants kept,
numbers unchanged on the CPU, and on OpenCL after a full build.

``pytest -m fuzz --hypothesis-profile long`` runs thousands of the first;
the OpenCL one builds and runs every module, so it takes its count from
``TEXSCOPE_OPENCL_FUZZ_EXAMPLES`` (25 by default).
"""

import os

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

import texscope
from conftest import ADRENO, TINY
from fuzz_models import build, recipes
from texscope import opencl
from texscope import run_on_opencl
from texscope.diagnostics.verify import check_invariants, equivalent

@pytest.mark.fuzz
@given(recipe=recipes(), tiny=st.booleans())
# Found by the long profile: a copy into a texture flavour no tensor is written
# in had no VDevice in global_infos.
@example(recipe=(4, 80, 4, (("conv", 0, 0, False), ("mean", 1, 0, False), ("conv", 0, 0, False),
                            ("conv", 2, 0, False), ("conv", 0, 0, False), ("conv", 0, 0, False))),
         tiny=True)
def test_random_modules_keep_invariants_and_numbers(recipe, tiny):
    target = TINY if tiny else ADRENO
    before = build(recipe)
    after = texscope.texture_scope_pipeline(target, check=True)(before)
    assert check_invariants(after, target) == []
    text = after.script()
    event(f"textures: {'yes' if 'texture' in text else 'no'}")
    event(f"copies: {text.count('R.to_vdevice(')}")
    comparison = equivalent(before, after)
    assert comparison.ok, comparison


@pytest.mark.fuzz
@settings(max_examples=int(os.environ.get("TEXSCOPE_OPENCL_FUZZ_EXAMPLES", 25)))
@given(recipe=recipes(max_steps=5), tiny=st.booleans())
# Found by this test: constants reaching a kernel crashed the OpenCL executor.
@example(recipe=(4, 8, 4, (("conv", 0, 0, True), ("bias_add", 1, 0, True))), tiny=False)
# And: a layer_norm writing a texture (its registry entry offered one) was
# left off GPU threads by TVM's Adreno fallback and crashed LLVM codegen.
@example(recipe=(3, 4, 4, (("conv", 0, 0, False), ("layer_norm", 1, 0, False),
                           ("conv", 158, 0, False))), tiny=False)
# And: a mean over unit axes fused with the add reading it, which TVM 0.27's
# GPU fallback inlined into the reduction's update (3 * lv for 2 * lv).
@example(recipe=(3, 4, 4, (("mean", 0, 0, False), ("mean", 1, 0, False), ("conv", 0, 0, False),
                           ("add", 1, 1, False))), tiny=False)
# And: a pool of 640 texels on 256 threads, whose guarded reduction the texel
# writer could not vectorize; it declined, and TVM's Adreno fallback failed.
@example(recipe=(3, 80, 4, (("conv", 0, 1, False), ("conv", 0, 0, False), ("max_pool", 1, 0, False),
                            ("conv", 3, 0, False))), tiny=False)
def test_random_modules_run_on_opencl_as_on_the_cpu(recipe, tiny):
    device_limits = opencl.device_target(base="adreno-opencl")
    target = dict(device_limits, texture_spatial_limit=64, texture_depth_limit=16) if tiny \
        else device_limits
    comparison = run_on_opencl(build(recipe), target)
    assert comparison.ok, comparison
