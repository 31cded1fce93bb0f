"""A channel pad of whole texels done on the packed tensor."""

import numpy as np
import pytest
import tvm
from tvm import relax

from conftest import run_pass
from test_opencl_run import assert_close
import texscope
from texscope import opencl
from texscope.diagnostics import verify
from texscope.opencl.source import kernel_bodies
from modules import texel_pads
from texscope.rewrites.texel_pad import PadWholeTexels


def _run_on_cpu(mod, data):
    executable = tvm.compile(mod, tvm.target.Target("llvm"))
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(data)).numpy()


def test_a_residuals_whole_texel_pad_is_done_on_the_packed_tensor():
    out = run_pass(PadWholeTexels(), texel_pads.ResidualPad)
    tvm.ir.assert_structural_equal(out, texel_pads.ResidualPadOnPacked)


def test_the_packed_pad_computes_what_unpack_pad_pack_computes():
    data = np.random.default_rng(0).standard_normal((1, 6, 8, 8, 4)).astype("float32")
    expected = _run_on_cpu(texel_pads.ResidualPad, data)
    np.testing.assert_array_equal(_run_on_cpu(PadWholeTexels()(texel_pads.ResidualPad), data),
                                  expected)
    assert expected.shape == (1, 7, 8, 8, 4) and not expected[:, 6].any()


@pytest.mark.parametrize("name", ["HalfTexelPad", "RowPad"])
def test_other_pads_stay(name):
    mod = getattr(texel_pads, name)
    tvm.ir.assert_structural_equal(run_pass(PadWholeTexels(), mod), mod)


def test_a_pooled_residuals_pad_fuses_with_the_pool_and_computes_the_cpu_numbers():
    mod = texel_pads.PooledResidualPad
    # Texture limits no larger than the device in hand takes (PoCL sizes its
    # images from the machine's memory).
    result = texscope.build(mod, opencl.device_target())
    inputs = verify.random_inputs(mod, 0)
    assert_close(opencl.run(result, inputs), verify.reference_outputs(mod, inputs))
    assert result.report.build["copies_left"] == 0
    pools = [name for name in kernel_bodies(result.opencl_source) if "pool" in name]
    assert len(pools) == 1 and "pad" in pools[0]


def test_a_residual_pad_in_a_convs_epilogue_is_inlined_and_computes_the_cpu_numbers():
    mod = texel_pads.ConvResidualPad
    result = texscope.build(mod, opencl.device_target())
    inputs = verify.random_inputs(mod, 0)
    assert_close(opencl.run(result, inputs), verify.reference_outputs(mod, inputs))
    kernels = list(kernel_bodies(result.opencl_source))
    (fused,) = [name for name in kernels if "pad" in name and "conv2d" in name]
    # One kernel: a pad left to the default schedule was two more.
    assert not [name for name in kernels if name.startswith(fused[:-len("kernel")]) and name != fused]
