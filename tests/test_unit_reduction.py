"""Reductions of one step made element-wise before scheduling."""

import numpy as np
import tvm
from tvm import relax, s_tir
from tvm.s_tir import dlight

import texscope
from conftest import BeforeScheduling
from modules import unit_reductions as cases
from texscope.backend.schedules import kernels as schedule
from texscope.backend.schedules.unit_reduction import UnitReductionsAsElementWise
from texscope.diagnostics import verify


def test_a_sum_over_unit_axes_becomes_element_wise():
    before = tvm.ir.load_json(tvm.ir.save_json(cases.UnitSum))
    out = UnitReductionsAsElementWise(cases.UnitSum)
    assert s_tir.analysis.verify_well_formed(out)
    tvm.ir.assert_structural_equal(out, cases.UnitSumElementWise)
    tvm.ir.assert_structural_equal(cases.UnitSum, before)


def test_a_reduction_of_two_steps_is_left_alone():
    out = UnitReductionsAsElementWise(cases.SumOverTwo)
    assert out["main"].same_as(cases.SumOverTwo["main"])


def _fused_mean_add():
    mod = relax.transform.LegalizeOps()(cases.MeanOfMean)
    mod = relax.transform.AnnotateTIROpPattern()(mod)
    mod = relax.transform.FuseTIR()(relax.transform.FuseOps()(mod))
    (name,) = [g.name_hint for g in mod.functions if "add" in g.name_hint]
    return mod[name]


def _update_reads_its_own_output(func) -> bool:
    """Whether the single scheduled block reads the buffer it writes."""
    text = func.script()
    return "T_add_intermediate[T.int64(0), v0, T.int64(0), T.int64(0)] + lv" in text


def test_tvms_gpu_fallback_miscompiles_the_fused_kernel_unless_it_is_element_wise():
    target = tvm.target.Target({"kind": "opencl"}, host="llvm")
    func = _fused_mean_add()
    upstream = dlight.gpu.Fallback().apply(func, target, False).mod["main"]
    # The add inlined into the reduction's update reads the add's own output.
    assert _update_reads_its_own_output(upstream)
    fixed = UnitReductionsAsElementWise(tvm.IRModule({"main": func}))["main"]
    scheduled = dlight.gpu.Fallback().apply(fixed, target, False).mod["main"]
    assert not _update_reads_its_own_output(scheduled)


def test_the_mean_of_a_mean_runs_on_opencl_as_on_the_cpu():
    inputs = verify.random_inputs(cases.MeanOfMean)
    result = texscope.opencl.run(texscope.build(cases.MeanOfMean, "adreno-opencl"), inputs)
    (expected,) = verify.reference_outputs(cases.MeanOfMean, inputs)
    np.testing.assert_allclose(result.outputs[0], expected, rtol=1e-6, atol=1e-6)


def test_a_conv_of_one_product_per_output_is_scheduled_as_element_wise_and_computes_the_cpus():
    capture = BeforeScheduling()
    with tvm.transform.PassContext(instruments=[capture]):
        result = texscope.build(cases.DepthwiseScale, "adreno-opencl")
    (conv,) = [f for g, f in capture.module.functions.items() if "conv2d" in g.name_hint]
    assert not schedule._reducing_blocks(conv)
    inputs = verify.random_inputs(cases.DepthwiseScale)
    run = texscope.opencl.run(result, inputs)
    (expected,) = verify.reference_outputs(cases.DepthwiseScale, inputs)
    np.testing.assert_allclose(run.outputs[0], expected, rtol=1e-6, atol=1e-6)
