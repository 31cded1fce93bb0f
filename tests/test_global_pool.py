"""A global average pool over a large map becomes a pool of its rows, then
of their means: a thread per row and channel block instead of one per
channel block summing the whole map."""

import tvm
from tvm.script import ir as I
from tvm.script import relax as R

import texscope
from texscope import opencl
from texscope.diagnostics import verify
from texscope.rewrites.global_pool import SplitGlobalPools

from conftest import run_pass


@I.ir_module
class GlobalPools:
    @R.function
    def main(x: R.Tensor((1, 16, 32, 8), "float32"), y: R.Tensor((1, 8, 7, 7), "float32")):
        with R.dataflow():
            whole = R.nn.avg_pool2d(x, pool_size=[16, 32], strides=[16, 32], layout="NHWC")
            adaptive = R.nn.adaptive_avg_pool2d(x, output_size=[1, 1], layout="NHWC")
            # Left as they are: a window smaller than the map, a 7 x 7 map.
            windows = R.nn.avg_pool2d(x, pool_size=[2, 2], strides=[2, 2], layout="NHWC")
            small = R.nn.adaptive_avg_pool2d(y, output_size=[1, 1])
            R.output(whole, adaptive, windows, small)
        return (whole, adaptive, windows, small)


@I.ir_module
class GlobalPoolsSplit:
    @R.function
    def main(x: R.Tensor((1, 16, 32, 8), "float32"), y: R.Tensor((1, 8, 7, 7), "float32")):
        with R.dataflow():
            rows = R.nn.avg_pool2d(x, pool_size=[1, 32], strides=[1, 32], layout="NHWC")
            whole = R.nn.avg_pool2d(rows, pool_size=[16, 1], strides=[16, 1], layout="NHWC")
            rows1 = R.nn.avg_pool2d(x, pool_size=[1, 32], strides=[1, 32], layout="NHWC")
            adaptive = R.nn.avg_pool2d(rows1, pool_size=[16, 1], strides=[16, 1], layout="NHWC")
            windows = R.nn.avg_pool2d(x, pool_size=[2, 2], strides=[2, 2], layout="NHWC")
            small = R.nn.adaptive_avg_pool2d(y, output_size=[1, 1])
            R.output(whole, adaptive, windows, small)
        return (whole, adaptive, windows, small)


def test_a_global_average_pool_over_a_large_map_becomes_two_pools():
    out = run_pass(SplitGlobalPools(), GlobalPools)
    tvm.ir.assert_structural_equal(out, GlobalPoolsSplit)
    # The mean of the rows' means: float32 summed in another order.
    check = verify.equivalent(GlobalPools, out, rtol=1e-5, atol=1e-6)
    assert check.ok, check


@I.ir_module
class Squeeze:
    """selfie segmentation's squeeze: a conv's 32 x 32 map averaged whole."""

    @R.function
    def main(x: R.Tensor((1, 8, 32, 32), "float32"), w: R.Tensor((8, 8, 3, 3), "float32")):
        with R.dataflow():
            h = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            gv = R.nn.adaptive_avg_pool2d(h, output_size=[1, 1])
            R.output(gv)
        return gv


def test_the_two_pools_write_textures_and_compute_the_cpu_numbers():
    result = texscope.build(Squeeze, "adreno-opencl")
    pools = [g.name_hint for g in result.module.functions if "pool" in g.name_hint]
    assert len(pools) == 2
    inputs = verify.random_inputs(Squeeze)
    run = opencl.run(result, inputs)
    assert run.copies == 0 and run.images >= 3
    check = verify.compare(run.outputs, verify.reference_outputs(Squeeze, inputs),
                           rtol=1e-4, atol=1e-5)
    assert check.ok, check
