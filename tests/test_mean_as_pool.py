"""A mean over an image's rows and columns becomes a global average pool,
which packs and writes a texture: the 1 x 1 conv after it reads one."""

import tvm
from tvm.script import ir as I
from tvm.script import relax as R

import texscope
from texscope import opencl
from texscope.diagnostics import verify
from texscope.rewrites.mean_as_pool import MeanAsPool

from conftest import run_pass


@I.ir_module
class Means:
    @R.function
    def main(x: R.Tensor((1, 6, 10, 8), "float32")):
        with R.dataflow():
            nhwc = R.mean(x, axis=[1, 2], keepdims=True)
            nchw = R.mean(x, axis=[-1, -2], keepdims=True)
            # Left as they are: dimensions dropped, one axis, every axis.
            dropped = R.mean(x, axis=[1, 2], keepdims=False)
            rows = R.mean(x, axis=[2], keepdims=True)
            whole = R.mean(x, keepdims=True)
            R.output(nhwc, nchw, dropped, rows, whole)
        return (nhwc, nchw, dropped, rows, whole)


@I.ir_module
class MeansAsPools:
    @R.function
    def main(x: R.Tensor((1, 6, 10, 8), "float32")):
        with R.dataflow():
            nhwc = R.nn.adaptive_avg_pool2d(x, output_size=[1, 1], layout="NHWC")
            nchw = R.nn.adaptive_avg_pool2d(x, output_size=[1, 1], layout="NCHW")
            dropped = R.mean(x, axis=[1, 2], keepdims=False)
            rows = R.mean(x, axis=[2], keepdims=True)
            whole = R.mean(x, keepdims=True)
            R.output(nhwc, nchw, dropped, rows, whole)
        return (nhwc, nchw, dropped, rows, whole)


def test_a_spatial_mean_keeping_its_dimensions_becomes_a_global_average_pool():
    out = run_pass(MeanAsPool(), Means)
    tvm.ir.assert_structural_equal(out, MeansAsPools)
    check = verify.equivalent(Means, out, rtol=1e-6, atol=1e-6)
    assert check.ok, check


@I.ir_module
class SqueezeByMean:
    """selfie_segmentation_landscape's squeeze and excitation: a mean over
    a conv's NHWC map's rows and columns, a 1 x 1 conv of it, the map times
    the gate."""

    @R.function
    def main(x: R.Tensor((1, 9, 16, 8), "float32"), w0: R.Tensor((8, 3, 3, 8), "float32"),
             w1: R.Tensor((8, 1, 1, 8), "float32")):
        with R.dataflow():
            h = R.nn.conv2d(x, w0, padding=[1, 1, 1, 1], data_layout="NHWC", kernel_layout="OHWI")
            squeezed = R.mean(h, axis=[1, 2], keepdims=True)
            gate = R.sigmoid(R.nn.conv2d(squeezed, w1, data_layout="NHWC", kernel_layout="OHWI"))
            gv = R.multiply(h, gate)
            R.output(gv)
        return gv


def test_the_conv_after_a_spatial_mean_reads_a_texture_and_computes_the_cpu_numbers():
    # As a mean, a reduction TVM's generic schedules write into a buffer.
    result = texscope.build(SqueezeByMean, "adreno-opencl")
    figures = result.report.build
    assert figures["convs"] == figures["convs_reading_texture"] == 2
    inputs = verify.random_inputs(SqueezeByMean)
    run = opencl.run(result, inputs)
    assert run.copies == 0
    check = verify.compare(run.outputs, verify.reference_outputs(SqueezeByMean, inputs),
                           rtol=1e-4, atol=1e-4)
    assert check.ok, check
