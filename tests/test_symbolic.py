"""Models of symbolic input size: one build runs at every size on OpenCL.

The plan carries the size variables, every size that depends on them as an
expression, and the replay binds them from the input arrays."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import tvm
from tvm import relax, tirx
from tvm.s_tir import dlight

import texscope
from texscope import opencl
from texscope.backend.build import fuse_passes
from texscope.cli import main
from texscope.backend.schedules.kernels import EpilogueConv2d, _NoneOnScheduleError
from texscope.diagnostics import verify
from texscope.opencl import sizes
from texscope.opencl.plan import KernelStep, Plan, ScalarArg, TensorSpec, read_plan
from texscope.opencl.resolve import bind_sizes, resolved
from texscope.opencl.program import read_program
from texscope.opencl.tir_sizes import size_text, substituted
from texscope.pipeline import texture_scope_pipeline
from texscope.rewrites.legalize import REPLACED
from texscope.rewrites.pad_channels import PadChannels

from conftest import ADRENO, run_pass
from modules import symbolic
from test_replay import replay_without_tvm

SIZES = [(16, 20), (33, 17)]
TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def _build(mod, target="adreno-opencl"):
    return texscope.build(mod, opencl.device_target(None, target))


@pytest.fixture(scope="module")
def nchw():
    return _build(symbolic.NCHW)


def _inputs(mod, height, width, seed=0):
    return verify.random_inputs(mod, seed, sizes={"h": height, "w": width})


@pytest.mark.parametrize("mod, target", [
    (symbolic.NCHW, "adreno-opencl"), (symbolic.NHWC, "adreno-opencl"),
    (symbolic.NHWC, "mali-opencl"),
], ids=["nchw-adreno", "nhwc-adreno", "nhwc-mali"])
def test_one_build_runs_at_two_sizes_with_the_cpus_numbers(mod, target):
    result = _build(mod, target)
    shapes = []
    for seed, (height, width) in enumerate(SIZES):
        inputs = _inputs(mod, height, width, seed)
        run = opencl.run(result, inputs)
        check = verify.compare(run.outputs, verify.reference_outputs(mod, inputs), **TOLERANCE)
        assert check.ok, (height, width, check)
        # Activations of symbolic size are buffers; the packed weights are images.
        assert run.copies == 0 and run.images > 0
        shapes.append(run.outputs[0].shape)
    assert shapes[0] != shapes[1]


def test_the_symbolic_plan_writes_sizes_as_expressions_and_round_trips(nchw, tmp_path):
    plan = opencl.plan_of(nchw)
    assert plan.sizes == ("h", "w")
    assert plan.spec("x").shape == (1, 3, "h", "w")
    assert plan.spec(plan.outputs[0]).shape == (1, 16, "(h - 3) // 4 + 1", "(w - 3) // 4 + 1")
    kernels = [s for s in plan.steps if isinstance(s, KernelStep)]
    # The shape values TVM's kernels take as scalars, and their work sizes.
    assert any(isinstance(a, ScalarArg) and a.value == "h * w" for s in kernels for a in s.args)
    assert any(sizes.is_symbolic(g) for s in kernels for g in s.global_size)
    plan.write(tmp_path)
    data = json.loads((tmp_path / "plan.json").read_text())
    assert data["version"] == 2 and data["sizes"] == ["h", "w"]
    assert read_plan(tmp_path) == plan


def test_the_replay_binds_the_sizes_from_the_inputs_without_tvm(nchw, tmp_path):
    nchw.export(tmp_path / "out")
    inputs = _inputs(symbolic.NCHW, 24, 13)
    np.savez(tmp_path / "inputs.npz", *inputs)
    np.savez(tmp_path / "expected.npz", *verify.reference_outputs(symbolic.NCHW, inputs))
    done = replay_without_tvm(tmp_path / "out", "--inputs", tmp_path / "inputs.npz",
                              "--expected", tmp_path / "expected.npz", "--tolerance", "1e-5")
    assert done.returncode == 0, done.stderr
    assert "-> OK" in done.stdout


def _one_line_exit_2(done, message):
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.startswith("replay: error: ") and done.stderr.count("\n") == 1
    assert message in done.stderr


def test_a_wrong_rank_or_an_unbound_size_is_one_line_exit_2(nchw, tmp_path):
    nchw.export(tmp_path / "out")
    inputs = _inputs(symbolic.NCHW, 16, 16)
    with pytest.raises(texscope.TexscopeError, match=r"input x has shape \(1, 3, h, w\), 4-D; "
                                                     r"got a 3-D array"):
        opencl.run(nchw, [inputs[0][0], *inputs[1:]])
    np.savez(tmp_path / "flat.npz", inputs[0][0], *inputs[1:])
    _one_line_exit_2(replay_without_tvm(tmp_path / "out", "--inputs", tmp_path / "flat.npz"),
                     "input x has shape (1, 3, h, w), 4-D; got a 3-D array")
    # Without inputs there is no size to make random ones of.
    _one_line_exit_2(replay_without_tvm(tmp_path / "out"), "symbolic sizes (h, w)")
    # A size variable that no input's shape gives.
    plan_file = tmp_path / "out" / "plan.json"
    data = json.loads(plan_file.read_text())
    data["sizes"].append("n")
    plan_file.write_text(json.dumps(data))
    np.savez(tmp_path / "inputs.npz", *inputs)
    _one_line_exit_2(replay_without_tvm(tmp_path / "out", "--inputs", tmp_path / "inputs.npz"),
                     "the size variable n is not the extent of any input's axis")


def test_an_input_too_small_for_the_model_is_a_named_error(nchw):
    with pytest.raises(texscope.TexscopeError, match="the input is too small"):
        opencl.run(nchw, _inputs(symbolic.NCHW, 2, 2))


def _handmade_plan(**changes) -> Plan:
    tensors = {"x": TensorSpec("x", (1, "n", "n * 2"), "float32", "global"),
               "y": TensorSpec("y", ("n",), "float32", "global"),
               "z": TensorSpec("z", ("n - 1",), "float32", "global")}
    step = KernelStep("z", "f", "f_kernel", (ScalarArg("n * 2 + 1", "int64"),),
                      ("(n + 63) // 64 * 64", 1, 1), (64, 1, 1))
    fields = dict(source="", tensors=tensors, inputs=("x", "y"), constants={},
                  steps=(step,), outputs=("z",), sizes=("n",))
    fields.update(changes)
    return Plan(**fields)


def test_sizes_bind_from_any_input_and_every_expression_resolves():
    plan = _handmade_plan()
    values = bind_sizes(plan, [np.zeros((1, 5, 10)), np.zeros(5)])
    assert values == {"n": 5}
    static = resolved(plan, values)
    assert static.sizes == () and static.spec("z").shape == (4,)
    (step,) = static.steps
    assert step.args[0].value == 11 and step.global_size == (64, 1, 1)


@pytest.mark.parametrize("arrays, message", [
    ([np.zeros((1, 5, 10)), np.zeros(6)], "input y gives n=6 .* but input x gave n=5"),
    ([np.zeros((1, 5, 9)), np.zeros(5)], r"input x has shape \(1, n, n \* 2\), which is "
                                         r"\[1, 5, 10\] for n=5; got an array of shape"),
    ([np.zeros((5, 10)), np.zeros(5)], "input x .* 3-D; got a 2-D array"),
    ([np.zeros((1, 5, 10))], "main takes 2 inputs, got 1"),
])
def test_inputs_that_disagree_with_the_plans_shapes_are_named(arrays, message):
    with pytest.raises(texscope.TexscopeError, match=message):
        bind_sizes(_handmade_plan(), arrays)


def test_a_tensor_or_a_launch_left_empty_by_a_small_input_is_named():
    with pytest.raises(texscope.TexscopeError, match=r"binding 'z': tensor z would have shape "
                                                     r"\[-1\] for n=0: the input is too small"):
        resolved(_handmade_plan(), {"n": 0})
    step = KernelStep("z", "f", "f_kernel", (), ("(n - 1) * 64", 1, 1), (64, 1, 1))
    with pytest.raises(texscope.TexscopeError, match=r"binding 'z': kernel f_kernel would run "
                                                     r"\[0, 1, 1\] work items"):
        resolved(_handmade_plan(steps=(step,)), {"n": 1})


def test_random_inputs_need_the_size_of_a_symbolic_input():
    with pytest.raises(texscope.TexscopeError, match="binding 'x': the extent h of x is symbolic"):
        verify.random_inputs(symbolic.NCHW)


@pytest.mark.parametrize("edit, message", [
    (lambda data: data.pop("sizes"), "the shape of x uses h, not among the plan's sizes \\(none\\)"),
    (lambda data: data["tensors"][0]["shape"].__setitem__(2, "h +"), "'h \\+' does not parse"),
    (lambda data: data["tensors"][0]["shape"].__setitem__(2, "h ** 2"), "is not allowed"),
])
def test_a_plan_with_a_broken_size_is_refused_when_read(nchw, tmp_path, edit, message):
    opencl.plan_of(nchw).write(tmp_path)
    data = json.loads((tmp_path / "plan.json").read_text())
    edit(data)
    (tmp_path / "plan.json").write_text(json.dumps(data))
    with pytest.raises(texscope.TexscopeError, match=message):
        read_plan(tmp_path)


def test_an_unbound_size_variable_is_named():
    plan = _handmade_plan(sizes=("n", "m"))
    with pytest.raises(texscope.TexscopeError, match="size variable m is not the extent"):
        bind_sizes(plan, [np.zeros((1, 5, 10)), np.zeros(5)])
    with pytest.raises(texscope.TexscopeError, match="the size variable m is not bound"):
        sizes.evaluate("m + 1", {"n": 3})


@pytest.mark.parametrize("text, value", [
    ("(h - 1) // 2 + 1", 8), ("-7 // 2", -4), ("-7 % 3", 2), ("truncdiv(-7, 2)", -3),
    ("truncmod(-7, 3)", -1), ("min(h, w) * 2 - max(h, 3)", 14), ("h - (w - 1)", 2),
    ("-h", -16), ("h * w // 4 % 7", 4), ("12", 12),
])
def test_size_expressions_evaluate_as_tir_does(text, value):
    assert sizes.evaluate(text, {"h": 16, "w": 15}) == value


@pytest.mark.parametrize("text", [
    "__import__('os')", "h ** 2", "h.real", "1.5", "h / 2", "abs(h)", "min(h)", "h if w else 1",
    "True", "[h]", "h; w", "lambda: 1",
])
def test_anything_else_is_refused_never_evaluated(text):
    with pytest.raises(texscope.TexscopeError, match="size expression"):
        sizes.evaluate(text, {"h": 16, "w": 15})


def test_division_by_zero_is_a_named_error():
    for text in ("h // (w - 15)", "h % (w - 15)", "truncdiv(h, w - 15)"):
        with pytest.raises(texscope.TexscopeError, match="divides by zero"):
            sizes.evaluate(text, {"h": 16, "w": 15})


H, W = tirx.Var("h", "int64"), tirx.Var("w", "int64")
THREE = tirx.IntImm("int64", 3)
TIR_SIZES = [
    (H - 1) // 2 + 1, H - (W - 1), H - (W + 1) * 3, (H + 15) // 16 * 16,
    tirx.Div(H - 7, W), tirx.Mod(H - 7, W), tirx.Min(H, W) * 2 - tirx.Max(H, THREE),
    H // (W // 2 + 1) % 5, tirx.Cast("int32", H * W) + 1, H * (W - 3) // 2 - 4,
]


@pytest.mark.parametrize("expr", TIR_SIZES, ids=str)
def test_tir_sizes_written_as_text_evaluate_to_tvms_values(expr):
    text = size_text(expr)
    for height in range(-5, 12, 3):
        for width in (1, 2, 7):
            bound = {H: tirx.IntImm("int64", height), W: tirx.IntImm("int64", width)}
            folded = substituted(expr, bound)
            assert sizes.evaluate(text, {"h": height, "w": width}) == int(folded.value), text


def test_a_size_the_replay_cannot_evaluate_is_refused_when_the_plan_is_made():
    with pytest.raises(texscope.TexscopeError, match="cannot write the size"):
        size_text(tirx.Select(H > 2, H, W))


def test_a_symbolic_size_layout_transform_is_an_injective_gather():
    # TVM's scatter is opaque: an unpack, ReLU6 and repack of the NHWC
    # network were three kernels instead of one.
    out = run_pass(relax.transform.LegalizeOps(REPLACED), symbolic.Pack)
    patterns = [relax.transform.AnnotateTIROpPattern()(mod)["te_layout_transform"].attrs["op_pattern"]
                for mod in (out, relax.transform.LegalizeOps()(symbolic.Pack))]
    assert patterns == [2, 8]
    # The gather's output carries Relax's own extents.
    (gather,) = [f for f in out.functions.values() if isinstance(f, tirx.PrimFunc)]
    tvm.ir.assert_structural_equal(list(gather.params[-1].ty.shape),
                                   list(out["main"].ret_ty.shape.values), map_free_vars=True)
    inputs = _inputs(symbolic.Pack, 5, 3)
    np.testing.assert_array_equal(verify.reference_outputs(out, inputs)[0],
                                  inputs[0].reshape(1, 2, 4, 5, 3).transpose(0, 1, 3, 4, 2))


def test_a_symbolic_size_conv_pads_its_channels():
    out = run_pass(PadChannels(), symbolic.Stem)
    tvm.ir.assert_structural_equal(out, symbolic.StemPadded)


def _fused_conv(mod):
    """The fused conv + bias + ReLU of ``mod``, before scheduling."""
    target = tvm.target.Target(ADRENO, host="llvm")
    passes = tvm.transform.Sequential([tvm.tirx.transform.BindTarget(target),
                                       texture_scope_pipeline(target), *fuse_passes()])
    with target:
        fused = passes(mod)
    (name,) = [g.name_hint for g in fused.functions
               if "conv2d" in g.name_hint and "relu" in g.name_hint]
    return fused[name], target


@pytest.fixture(scope="module")
def fused_symbolic_conv():
    return _fused_conv(symbolic.NCHW)


def test_tvms_adreno_conv_rule_is_not_used_at_a_symbolic_size(fused_symbolic_conv):
    # Its vthread split of the output channels lost their bound once the
    # epilogue was inlined: the kernel wrote past its output (PoCL aborted).
    func, target = fused_symbolic_conv
    assert EpilogueConv2d().apply(func, target, False) is None
    static, _ = _fused_conv(relax.transform.BindSymbolicVars({"h": 16, "w": 16})(symbolic.NCHW))
    assert EpilogueConv2d().apply(static, target, False) is not None


def test_a_generic_rule_that_fails_declines_and_the_fallback_schedules(fused_symbolic_conv):
    func, target = fused_symbolic_conv
    with pytest.raises(tvm.s_tir.ScheduleError):
        dlight.gpu.GeneralReduction().apply(func, target, False)
    assert _NoneOnScheduleError(dlight.gpu.GeneralReduction()).apply(func, target, False) is None
    assert dlight.gpu.Fallback().apply(func, target, False) is not None


def test_two_size_variables_of_one_name_are_refused():
    first, second = tirx.Var("n", "int64"), tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType((first, 4), "float32"))
    y = relax.Var("y", relax.TensorType((second, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, y]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.add(x, x))
        bb.emit_func_output(out)
    with pytest.raises(texscope.TexscopeError, match="two size variables are named n"):
        read_program(bb.get())


SYMBOLIC_MODEL = (
    "from tvm.script import ir as I, relax as R\n\n"
    "@I.ir_module\nclass Net:\n    @R.function\n"
    "    def main(x: R.Tensor((1, 8, 'h', 'w'), 'float32'), k: R.Tensor((8, 8, 3, 3), 'float32')):\n"
    "        with R.dataflow():\n"
    "            c = R.nn.conv2d(x, k, padding=(1, 1), strides=2)\n"
    "            gv = R.nn.relu(c)\n"
    "            R.output(gv)\n"
    "        return gv\n"
)


def _texscope(*args):
    return subprocess.run([sys.executable, "-m", "texscope", *map(str, args)],
                          capture_output=True, text=True, check=False)


def test_the_run_command_takes_the_input_sizes(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(SYMBOLIC_MODEL)
    done = _texscope("run", model, "--size", "h=13", "--size", "w=9", "--tolerance", "1e-5")
    assert done.returncode == 0, done.stderr
    assert "0 copies" in done.stdout and "-> OK" in done.stdout


def test_the_run_command_without_sizes_is_one_line_exit_2(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(SYMBOLIC_MODEL)
    done = _texscope("run", model)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("texscope: error: main's inputs have symbolic sizes (h, w): give "
                           "each with --size, e.g. --size h=224\n")


@pytest.mark.parametrize("sizes, message", [
    (("--size", "h=13"), r"main's inputs have symbolic sizes \(w\)"),
    (("--size", "h=13", "--size", "w=9", "--size", "n=2"), "--size n: main's inputs have no "
                                                           "size of that name"),
    (("--size", "h=0"), "--size h=0: expected NAME=N with N a positive integer"),
])
def test_the_run_command_names_a_missing_or_wrong_size(tmp_path, capsys, sizes, message):
    model = tmp_path / "model.py"
    model.write_text(SYMBOLIC_MODEL)
    assert main(["run", str(model), *sizes]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search("^texscope: error: " + message, err), err
