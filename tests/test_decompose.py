"""What TVM 0.27 cannot build for a GPU (ewise_fma, conv2d_transpose with a
kernel layout other than IOHW, convs of symbolic size) builds with texscope
and computes the CPU's numbers on OpenCL; the convs of static size read
textures."""

import numpy as np
import pytest
import tvm
from tvm import relax

import texscope
from texscope import opencl
from texscope.diagnostics import verify
from texscope.rewrites.decompose import DecomposeForGPU

from conftest import run_pass
from modules import decomposed

TARGET = tvm.target.Target("qcom/adreno-opencl-texture", host="llvm")


def _run(mod, inputs, target="adreno-opencl"):
    result = texscope.build(mod, opencl.device_target(None, target))
    run = opencl.run(result, inputs)
    assert run.copies == 0 and result.report.build["copies_left"] == 0
    return result, run.outputs


@pytest.mark.parametrize("mod", [decomposed.Fma, decomposed.TransposeOIHW],
                         ids=["ewise_fma", "conv2d_transpose_oihw"])
def test_tvms_own_build_stops_in_vm_codegen(mod):
    with pytest.raises(tvm.error.InternalError, match="CodeGenVM cannot emit"):
        tvm.compile(mod, target=TARGET)


def test_ewise_fma_becomes_multiply_add():
    out = run_pass(DecomposeForGPU(), decomposed.Fma)
    tvm.ir.assert_structural_equal(out, decomposed.FmaDecomposed)


def test_ewise_fma_runs_on_opencl():
    x, y, z = verify.random_inputs(decomposed.Fma)
    _, (out,) = _run(decomposed.Fma, [x, y, z])
    np.testing.assert_allclose(out, x * y + z, rtol=1e-6, atol=1e-6)


def _conv_inputs(mod):
    found = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(e) if isinstance(
        e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name.startswith("relax.nn.conv2d")
        else None)
    return found


def test_a_transpose_whose_kernel_is_its_stride_becomes_a_1x1_conv_then_depth_to_space():
    out = run_pass(DecomposeForGPU(), decomposed.TransposeBlocks)
    tvm.ir.assert_structural_equal(out, decomposed.TransposeBlocksDecomposed)
    check = verify.equivalent(decomposed.TransposeBlocks, out, rtol=1e-5, atol=1e-5)
    assert check.ok, check


def test_a_transpose_whose_kernel_is_its_stride_reads_a_texture_and_matches_the_cpu():
    inputs = verify.random_inputs(decomposed.TransposeBlocks)
    result, outputs = _run(decomposed.TransposeBlocks, inputs)
    assert result.report.build["convs_reading_texture"] == 1
    check = verify.compare(outputs, verify.reference_outputs(decomposed.TransposeBlocks, inputs),
                           rtol=1e-5, atol=1e-5)
    assert check.ok, check


def test_a_conv2d_transpose_becomes_a_conv_of_its_zero_inserted_data():
    out = run_pass(DecomposeForGPU(), decomposed.TransposeOIHW)
    (conv,) = _conv_inputs(out)
    assert conv.op.name == "relax.nn.conv2d"
    # 8 pixels with a zero after each but the last: 15; padding 3 - 1 - 1, and
    # the output padding at the bottom and right.
    assert [int(d) for d in conv.args[0].ty.shape.values] == [1, 8, 15, 15]
    assert [int(p) for p in conv.attrs.padding] == [1, 1, 2, 2]
    assert [int(d) for d in conv.ty.shape.values] == [1, 4, 16, 16]


@pytest.mark.parametrize("target", ["adreno-opencl", "mali-opencl"])
def test_an_oihw_conv2d_transpose_reads_a_texture_and_matches_the_cpu(target):
    inputs = verify.random_inputs(decomposed.TransposeOIHW)
    # TVM legalizes the IOHW kernel layout only: the CPU runs that one.
    expected = verify.reference_outputs(decomposed.TransposeIOHW,
                                        [inputs[0], inputs[1].transpose(1, 0, 2, 3).copy()])
    result, outputs = _run(decomposed.TransposeOIHW, inputs, target)
    assert result.report.build["convs_reading_texture"] == result.report.build["convs"] == 1
    check = verify.compare(outputs, expected, rtol=1e-4, atol=1e-4)
    assert check.ok, check


def test_a_grouped_conv2d_transpose_becomes_a_grouped_conv_of_regrouped_weights():
    out = run_pass(DecomposeForGPU(), decomposed.TransposeGrouped)
    tvm.ir.assert_structural_equal(out, decomposed.TransposeGroupedDecomposed)


@pytest.mark.parametrize("mod, reference, kernel_to_iohw", [
    (decomposed.TransposeGrouped, decomposed.TransposeGrouped, lambda w: w),
    (decomposed.TransposeDepthwiseOIHW, decomposed.TransposeDepthwiseIOHW,
     lambda w: w.transpose(1, 0, 2, 3).copy()),
], ids=["grouped_iohw", "depthwise_oihw"])
@pytest.mark.parametrize("target", ["adreno-opencl", "mali-opencl"])
def test_a_grouped_conv2d_transpose_reads_a_texture_and_matches_the_cpu(
        mod, reference, kernel_to_iohw, target):
    inputs = verify.random_inputs(mod)
    expected = verify.reference_outputs(reference, [inputs[0], kernel_to_iohw(inputs[1])])
    result, outputs = _run(mod, inputs, target)
    assert result.report.build["convs_reading_texture"] == result.report.build["convs"] == 1
    check = verify.compare(outputs, expected, rtol=1e-5, atol=1e-5)
    assert check.ok, check


def test_an_nhwc_conv2d_transpose_with_odd_channels_matches_the_cpu():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (1, 5, 7, 6)).astype("float32")
    w = rng.uniform(-0.2, 0.2, (4, 4, 6, 6)).astype("float32")  # HWOI
    result, (out,) = _run(decomposed.TransposeNHWC, [x, w])
    assert result.report.build["convs_reading_texture"] == 1
    # The CPU reference: NCHW data, IOHW kernel.
    data = relax.Var("x", relax.TensorType((1, 6, 5, 7), "float32"))
    kernel = relax.Var("w", relax.TensorType((6, 6, 4, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [data, kernel]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv2d_transpose(data, kernel, strides=2,
                                                            padding=[1, 2, 2, 1]))
        bb.emit_func_output(y)
    (expected,) = verify.reference_outputs(
        bb.get(), [x.transpose(0, 3, 1, 2).copy(), w.transpose(3, 2, 0, 1).copy()])
    np.testing.assert_allclose(out.transpose(0, 3, 1, 2), expected, rtol=1e-4, atol=1e-4)


def test_a_symbolic_size_conv_builds_and_runs_where_tvms_build_does_not():
    # TVM's SpecializePrimFuncBasedOnCallSite rebuilds each parameter from the
    # call site's shape, and tirx.Specialize rejects ``height + 2 - 3 + 1``;
    # texscope specializes texture parameters only (static by definition) and
    # leaves kernels of symbolic shape to TVM's generic GPU schedules.
    with pytest.raises(TypeError, match="an independent Var, but got height"):
        tvm.compile(decomposed.SymbolicConv, target=TARGET)
    result = texscope.build(decomposed.SymbolicConv, "adreno-opencl")
    assert result.report.build["convs"] == 1 and result.report.build["convs_reading_texture"] == 0
    # One build, two sizes (tests/test_symbolic.py runs whole networks).
    for height, width in ((10, 12), (7, 19)):
        inputs = verify.random_inputs(decomposed.SymbolicConv, sizes={"height": height,
                                                                      "width": width})
        (out,) = opencl.run(result, inputs).outputs
        (expected,) = verify.reference_outputs(decomposed.SymbolicConv, inputs)
        assert out.shape == (1, 8, height, width)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
