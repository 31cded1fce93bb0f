"""Weight packing lifted into ``main_transform_params`` (``lift_weights``)."""

import subprocess

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

import texscope
from texscope import opencl
from texscope.backend.memory.device_memory import MemoryCapture, device_memory
from texscope.diagnostics import verify
from texscope.frontend.naming import ConvertKeepingNames
from texscope.knowledge.targets import texture_target
from texscope.models import zoo
from texscope.pipeline import texture_scope_pipeline
from texscope.rewrites.lift_weights import LiftWeightTransforms, lifted_function

from conftest import bindings
from modules import lifted, symbolic

GENERIC = tvm.target.Target({"kind": "opencl"}, host="llvm")


def packed(weight: np.ndarray) -> np.ndarray:
    """OIHW -> OIHW4o (output channels in texels of 4), by numpy."""
    out_channels = weight.shape[0]
    return np.ascontiguousarray(
        weight.reshape(out_channels // 4, 4, *weight.shape[1:]).transpose(0, 2, 3, 4, 1))


def bias_packed(bias: np.ndarray) -> np.ndarray:
    """(1, C, 1, 1) -> (1, C/4, 1, 1, 4)."""
    return np.ascontiguousarray(bias.reshape(1, bias.shape[1] // 4, 4, 1, 1).transpose(0, 1, 3, 4, 2))


def stage_one(mod):
    texture = texture_target("adreno-opencl")
    with texture.target:
        return ConvertKeepingNames(texture.target)(mod)


def stage_one_lifted(mod):
    return texscope.LiftWeightTransforms(stage_one(mod))


def test_weight_packing_moves_into_transform_params():
    out = stage_one_lifted(lifted.ConvWeights)
    assert out["main_transform_params"].script() == '''\
# from tvm.script import relax as R

@R.function
def main_transform_params(model_params: R.Tuple(R.Tensor((8, 8, 3, 3), dtype="float32"), R.Tensor((8, 8, 3, 3), dtype="float32"), R.Tensor((1, 8, 1, 1), dtype="float32"))) -> R.Tuple(R.Tensor((2, 8, 3, 3, 4), dtype="float32"), R.Tensor((2, 8, 3, 3, 4), dtype="float32"), R.Tensor((1, 2, 1, 1, 4), dtype="float32")):
    R.func_attr({"num_input": 0})
    with R.dataflow():
        w1: R.Tensor((8, 8, 3, 3), dtype="float32") = model_params[0]
        w1_layout_transform = R.call_tir(te_layout_transform1, (w1,), out_ty=R.Tensor((2, 8, 3, 3, 4), dtype="float32"))
        w2: R.Tensor((8, 8, 3, 3), dtype="float32") = model_params[1]
        w2_layout_transform = R.call_tir(te_layout_transform1, (w2,), out_ty=R.Tensor((2, 8, 3, 3, 4), dtype="float32"))
        b2: R.Tensor((1, 8, 1, 1), dtype="float32") = model_params[2]
        b2_layout_transform = R.call_tir(te_layout_transform2, (b2,), out_ty=R.Tensor((1, 2, 1, 1, 4), dtype="float32"))
        output_tuple: R.Tuple(R.Tensor((2, 8, 3, 3, 4), dtype="float32"), R.Tensor((2, 8, 3, 3, 4), dtype="float32"), R.Tensor((1, 2, 1, 1, 4), dtype="float32")) = w1_layout_transform, w2_layout_transform, b2_layout_transform
        R.output(output_tuple)
    return output_tuple'''
    main = out["main"]
    assert [(p.name, [int(d) for d in p.ty.shape.values]) for p in main.params] == [
        ("x", [1, 8, 16, 16]), ("w1_layout_transform", [2, 8, 3, 3, 4]),
        ("w2_layout_transform", [2, 8, 3, 3, 4]), ("b2_layout_transform", [1, 2, 1, 1, 4])]
    assert int(main.attrs["num_input"]) == 1
    # Only the input's packing, the convs' epilogues and the result's unpacking are left.
    assert [b.value.args[0].name_hint for b in bindings(out)
            if isinstance(b.value, relax.Call) and b.value.op.name == "relax.call_tir"] == [
        "te_layout_transform", "relu", "add", "te_layout_transform3"]


@pytest.mark.parametrize("network", [n for n in sorted(zoo.NETWORKS)
                                     if n not in ("chain256", "chain1024")])  # chain64 is one
def test_the_shortcut_lifts_as_tvms_pass_lifts(network):
    mod = stage_one(zoo.with_declared_weights(zoo.NETWORKS[network]()))
    shortcut = lifted_function(mod, mod.get_global_var("main"))
    assert shortcut is not None
    tvm.ir.assert_structural_equal(shortcut, relax.transform.LiftTransformParams()(mod))


def test_symbolic_sizes_go_to_tvms_pass():
    mod = stage_one(zoo.with_declared_weights(symbolic.NCHW))
    assert lifted_function(mod, mod.get_global_var("main")) is None
    tvm.ir.assert_structural_equal(LiftWeightTransforms(mod),
                                   relax.transform.LiftTransformParams()(mod))


def test_lifted_weights_stay_in_buffers_and_nothing_is_copied():
    result = texscope.build(lifted.ConvWeights, "adreno-opencl", lift_weights=True)
    for name in ("main", "main_transform_params"):
        assert "to_vdevice" not in result.module[name].script()
    assert result.report.build["copies_left"] == 0
    main = result.module["main"]
    for param in main.params[1:]:
        assert param.ty.vdevice.memory_scope == "global", param.name
    # The convs still compute on images (their input and output).
    assert result.report.build["convs_reading_texture"] == 2
    assert "a weight parameter" in result.report.to_markdown()


def test_the_lifted_model_computes_what_the_model_does():
    result = texscope.build(lifted.ConvWeights, "adreno-opencl", lift_weights=True)
    x, w1, w2, b2 = inputs = verify.random_inputs(lifted.ConvWeights, seed=3)
    run = opencl.run(result, [x, packed(w1), packed(w2), bias_packed(b2)])
    check = verify.compare(run.outputs, verify.reference_outputs(lifted.ConvWeights, inputs),
                           rtol=1e-5, atol=1e-5)
    assert check.ok, check


def test_a_lifted_resnet_computes_what_the_resnet_does():
    """Batch norms folded into the weights and their statistics packed: all
    in the transform; main on OpenCL gets its results."""
    mod = zoo.with_declared_weights(zoo.NETWORKS["resnet"]())
    inputs = verify.random_inputs(mod, seed=1)
    result = texscope.build(mod, "adreno-opencl", lift_weights=True)
    assert "main_transform_params" in [g.name_hint for g in result.module.functions]
    run = opencl.run(result, verify.lifted_inputs(mod, inputs, "adreno-opencl"))
    check = verify.compare(run.outputs, verify.reference_outputs(mod, inputs), rtol=1e-4, atol=1e-4)
    assert check.ok, check


def peak(build) -> int:
    capture = MemoryCapture()
    with tvm.transform.PassContext(instruments=[capture]):
        build()
    return device_memory(capture.modules[-1]).peak_bytes


def test_lifting_takes_the_packed_weight_off_the_peak():
    """A chain of convs with weight parameters: packed on every run, one
    packed weight sits above the all-buffer build's peak; lifted, none."""
    mod = zoo.with_declared_weights(zoo.conv_chain(8))
    all_buffer = peak(lambda: tvm.compile(mod, GENERIC))
    per_run = peak(lambda: texscope.build(mod, "adreno-opencl"))
    lifted_peak = peak(lambda: texscope.build(mod, "adreno-opencl", lift_weights=True))
    one_packed_weight = 32 * 32 * 3 * 3 * 4
    assert per_run == all_buffer + one_packed_weight
    assert lifted_peak == all_buffer


def test_the_pipeline_for_tvm_compile_lifts_too():
    target = texture_target("adreno-opencl").target
    with target:
        out = texture_scope_pipeline(target, lift_weights=True)(lifted.ConvWeights)
    assert [[int(d) for d in p.ty.shape.values] for p in out["main"].params] == [
        [1, 8, 16, 16], [2, 8, 3, 3, 4], [2, 8, 3, 3, 4], [1, 2, 1, 1, 4]]
    assert "main_transform_params" in [g.name_hint for g in out.functions]
    assert all(p.ty.vdevice.memory_scope == "global" for p in out["main"].params)


def test_the_callers_module_is_left_as_it_was():
    before = tvm_ffi.structural_hash(lifted.ConvWeights)
    texscope.build(lifted.ConvWeights, "adreno-opencl", lift_weights=True)
    assert tvm_ffi.structural_hash(lifted.ConvWeights) == before
    assert "main_transform_params" not in [g.name_hint for g in lifted.ConvWeights.functions]


def test_lifting_needs_the_weights_declared():
    with pytest.raises(texscope.TexscopeError, match="set the attribute num_input"):
        texscope.build(lifted.NoWeightsDeclared, "adreno-opencl", lift_weights=True)
    with pytest.raises(texscope.TexscopeError, match=r"function 'main'.*num_input=3 must count"):
        texscope.build(lifted.TooManyInputs, "adreno-opencl", lift_weights=True)
    taken = tvm.IRModule({**dict(lifted.ConvWeights.functions),
                          relax.GlobalVar("main_transform_params"): lifted.ConvWeights["main"]})
    with pytest.raises(texscope.TexscopeError, match="already has a function 'main_transform_params'"):
        texscope.build(taken, "adreno-opencl", lift_weights=True)


CONV_MODEL = """from tvm.script import ir as I, relax as R


@I.ir_module
class Conv:
    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), "float32"), w: R.Tensor((8, 8, 3, 3), "float32")):
        {attrs}
        with R.dataflow():
            y = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
            R.output(y)
        return y
"""


def build_lifting(tmp_path, attrs: str):
    """The installed command on a conv model file, lifting; its output directory."""
    model = tmp_path / "model.py"
    model.write_text(CONV_MODEL.format(attrs=attrs))
    out = tmp_path / "out"
    return out, subprocess.run(["texscope", "build", str(model), "--lift-weights", "-o", str(out)],
                               capture_output=True, text=True)


def test_the_command_lifts_weights(tmp_path):
    out, done = build_lifting(tmp_path, 'R.func_attr({"num_input": 1})')
    assert done.returncode == 0, done.stderr
    assert "lift_weights" in done.stdout
    assert "| main | w_layout_transform | 2x8x3x3x4 | float32 | 2304 | `global` |" in (
        out / "report.md").read_text()
    assert (out / "model.so").exists()


def test_the_command_says_when_no_weights_are_declared(tmp_path):
    out, done = build_lifting(tmp_path, "")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "set the attribute num_input" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


def test_the_command_runs_a_lifted_model_and_explains_it(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(CONV_MODEL.format(attrs='R.func_attr({"num_input": 1})'))
    done = subprocess.run(["texscope", "run", str(model), "--lift-weights"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "main_transform_params computed on the CPU" in done.stdout
    assert "-> OK" in done.stdout
    explained = subprocess.run(["texscope", "explain", str(model), "--lift-weights"],
                               capture_output=True, text=True)
    assert explained.returncode == 0, explained.stderr
    assert "w_layout_transform" in explained.stdout and "a weight parameter" in explained.stdout
