"""A clip (ReLU6) becomes maximum then minimum, follows the packed layout and
fuses into the conv before it: one tensor and one launch fewer per ReLU6."""

import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

import texscope
from texscope import opencl
from texscope.diagnostics import verify
from texscope.rewrites.clip_bounds import ClipAsMaxMin

from conftest import run_pass


@I.ir_module
class ConvRelu6:
    @R.function
    def main(x: R.Tensor((1, 8, 6, 6), "float32"), w: R.Tensor((8, 8, 3, 3), "float32")):
        with R.dataflow():
            y = R.nn.conv2d(x, w, padding=1)
            z = R.clip(y, 0, 6)
            R.output(z)
        return z


@I.ir_module
class ConvRelu6AsMaxMin:
    @R.function
    def main(x: R.Tensor((1, 8, 6, 6), "float32"), w: R.Tensor((8, 8, 3, 3), "float32")):
        with R.dataflow():
            y = R.nn.conv2d(x, w, padding=1)
            raised = R.maximum(y, R.const(0.0, "float32"))
            z = R.minimum(raised, R.const(6.0, "float32"))
            R.output(z)
        return z


def test_a_clip_with_constant_bounds_becomes_maximum_then_minimum():
    out = run_pass(ClipAsMaxMin(), ConvRelu6)
    tvm.ir.assert_structural_equal(out, ConvRelu6AsMaxMin)


def test_the_clip_fuses_into_the_packed_conv_and_computes_the_cpu_numbers():
    result = texscope.build(ConvRelu6, "adreno-opencl")
    # One kernel writes the conv's clipped output: no unpack, clip, repack.
    assert not [name for name in result.kernels.functions_items()
                if "layout_transform" in name[0].name_hint and "clip" in name[0].name_hint]
    assert any("conv2d" in g.name_hint and "maximum" in g.name_hint and "minimum" in g.name_hint
               for g, _ in result.module.functions_items())
    inputs = verify.random_inputs(ConvRelu6)
    inputs[0] = inputs[0] * 8  # conv outputs beyond both bounds, clipped to them
    expected = verify.reference_outputs(ConvRelu6, inputs)
    assert (expected[0] == 6).any() and (expected[0] == 0).any()
    check = verify.compare(opencl.run(result, inputs).outputs, expected, rtol=1e-4, atol=1e-4)
    assert check.ok, check
