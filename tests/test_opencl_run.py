"""Built texture programs run on a real OpenCL (PoCL in CI) and match the CPU."""

import copy

import attrs
import numpy as np
import pytest
import tvm
from tvm import relax

import texscope
from texscope import opencl
from texscope.diagnostics import verify
from texscope.models import zoo
from texscope.cli import main
from texscope.knowledge import profile as cost_profile
from texscope.opencl import memory
from texscope.opencl.launches import ParamArg, Workspace, kernel_launches
from texscope.opencl.plan import WorkspaceArg as PlanWorkspace
from texscope.opencl.program import Copy, KernelCall, TensorSpec, read_program
from texscope.opencl.source import kernel_signatures, pyopencl
from texscope.backend.lowering.specialize import KeepStorageChangesAsKernels, SplitPrimFuncsBySignature

from conftest import conv_reads_pay, run_pass
from modules import opencl_cases, rules, signatures, storage_views, texel_cases

TOLERANCE = dict(rtol=1e-3, atol=1e-3)


def run_and_compare(mod, seed=0, profile=None):
    """Build, run on OpenCL, and the CPU's outputs for the same inputs."""
    result = texscope.build(mod, "adreno-opencl", profile=profile)
    inputs = verify.random_inputs(mod, seed)
    run = opencl.run(result, inputs)
    return result, run, verify.reference_outputs(mod, inputs)


def assert_close(run, expected):
    check = verify.compare(run.outputs, expected, **TOLERANCE)
    assert check.ok, check


@pytest.mark.parametrize("name", [
    "Seed", "ConvRelu", "Residual", "MaxPool", "Concat", "SplitFields", "Softmax",
    "Reductions", "Depthwise", "BatchNorm",
])
def test_rule_modules_compute_the_cpu_numbers_on_opencl(name):
    result, run, expected = run_and_compare(getattr(rules, name))
    assert_close(run, expected)
    # Every module above keeps at least one tensor in texture (an image).
    assert run.images >= 1
    assert result.report.build["kernels_with_images"] >= 1


@pytest.mark.parametrize("name", ["AvgPool", "LayerNorm", "PackedInput"])
def test_pools_layer_norm_and_packed_inputs_on_opencl(name):
    _, run, expected = run_and_compare(getattr(opencl_cases, name))
    assert_close(run, expected)
    assert run.images >= 1


def test_the_seed_conv_reads_its_input_and_weights_from_images():
    result = texscope.build(rules.Seed, "adreno-opencl")
    program = read_program(result.module)
    conv = next(s for s in program.steps if isinstance(s, KernelCall) and "conv2d" in s.function)
    (launch,) = kernel_launches(result.kernels)[conv.function]
    scopes = {a.index: a.scope for a in launch.args if isinstance(a, ParamArg)}
    assert scopes[0] == conv.tensors[0].scope == "global.texture-nhwc"
    assert scopes[1] == conv.tensors[1].scope == "global.texture-weight"


def test_a_conflict_runs_a_real_copy_between_image_and_buffer():
    result, run, expected = run_and_compare(rules.Conflict, profile=conv_reads_pay())
    assert_close(run, expected)
    copies = [s for s in read_program(result.module).steps if isinstance(s, Copy)]
    assert copies and run.copies == len(copies)
    assert {(c.source.is_texture, c.target.is_texture) for c in copies} == {(True, False)}


def slow_conv_reads():
    """The Adreno defaults, but a packed or grouped conv's texture reads cost."""
    document = copy.deepcopy(dict(cost_profile.default("adreno").document))
    for name in ("packed_conv", "pointwise_conv", "depthwise_conv"):
        document["kernels"][name]["read_gain"] = {"value": -2.0, "source": "tests"}
    return cost_profile.from_document(document, "slow conv reads")


@pytest.mark.parametrize("name", ["Seed", "Depthwise", "Conflict"])
@pytest.mark.parametrize("prices", ["default", "slow conv reads"])
def test_packed_convs_reading_buffers_compute_the_cpu_numbers(name, prices):
    """A packed conv may read its data from a buffer: TVM's Adreno NCHWc
    kernel is then built with a buffer parameter for it, and computes right."""
    profile = slow_conv_reads() if prices != "default" else None
    result, run, expected = run_and_compare(getattr(rules, name), profile=profile)
    assert_close(run, expected)
    launches = kernel_launches(result.kernels)
    data_scopes = []
    for step in read_program(result.module).steps:
        if isinstance(step, KernelCall) and step.function.startswith("conv2d_NCHWc_OIHWo"):
            for launch in launches[step.function]:
                declared = {a.index: a.scope for a in launch.args if isinstance(a, ParamArg)}
                if 0 in declared:
                    assert declared[0] == step.tensors[0].scope
            data_scopes.append(step.tensors[0].scope)
    # Under the defaults only Conflict's second conv reads a buffer (a texture
    # of c would need a copy for the reductions); slow reads make all do.
    buffers = {"Seed": 0, "Depthwise": 0, "Conflict": 1}[name] if profile is None \
        else len(data_scopes)
    assert data_scopes.count("global") == buffers and data_scopes


def test_a_grouped_conv_writes_the_storage_its_plan_says():
    """texscope's grouped-conv legalization keeps the planned output VDevice
    (it took the input's texture scope before)."""
    document = copy.deepcopy(dict(cost_profile.default("adreno").document))
    document["kernels"]["depthwise_conv"] = {
        "read_gain": {"value": 1000.0, "source": "tests"},
        "write_gain": {"value": -1000.0, "source": "tests"}}
    for name in ("packed_conv", "pointwise_conv"):
        document["kernels"][name]["read_gain"] = {"value": -1000.0, "source": "tests"}
    result, run, expected = run_and_compare(
        rules.Depthwise, profile=cost_profile.from_document(document, "tests"))
    assert_close(run, expected)
    grouped = [s for s in read_program(result.module).steps
               if isinstance(s, KernelCall) and s.function.startswith("conv2d_NCHWc_OIHWo")][:2]
    # Its padding kernel reads the texture; the conv writes a (buffer).
    assert grouped[0].tensors[0].scope == "global.texture-weight"
    assert grouped[1].tensors[0].scope == "global"


def test_one_prim_func_with_two_storage_signatures_is_split():
    out = run_pass(SplitPrimFuncsBySignature, signatures.TwoSignatures)
    tvm.ir.assert_structural_equal(out, signatures.TwoSignaturesSplit)
    # Nothing to split: the module comes back as it was.
    assert run_pass(SplitPrimFuncsBySignature, out).same_as(out)


def test_a_kernel_shared_by_a_texture_and_a_buffer_output_writes_both_right():
    # Without the split, TVM's call-site specialization gives both convs the
    # buffer signature and the first writes a buffer where an image is read.
    result, run, expected = run_and_compare(opencl_cases.SharedKernel)
    assert_close(run, expected)
    convs = [s for s in read_program(result.module).steps
             if isinstance(s, KernelCall) and "conv2d" in s.function]
    assert len({c.function for c in convs}) == 2
    assert [c.tensors[-1].is_texture for c in convs] == [True, False]


NETWORKS = {
    "resnet": lambda: zoo.resnet_style(blocks=2, channels=16, image=32),
    "mobilenet_v2": lambda: zoo.mobilenet_v2_style(blocks=2, channels=16, image=32),
    "unet": lambda: zoo.unet_style(depth=2, channels=16, image=32),
    "inception": lambda: zoo.inception_block(channels=16, image=16),
}


@pytest.mark.parametrize("name", NETWORKS)
def test_networks_compute_the_cpu_numbers_on_opencl(name):
    result, run, expected = run_and_compare(NETWORKS[name]())
    assert_close(run, expected)
    image_launches = [launch for launches in kernel_launches(result.kernels).values()
                      for launch in launches
                      if any(isinstance(a, ParamArg) and "texture" in a.scope for a in launch.args)]
    assert run.images > 0 and image_launches


def test_an_unpack_reading_a_texture_computes_the_cpu_numbers():
    result, run, expected = run_and_compare(texel_cases.UnpackShared)
    assert_close(run, expected)
    assert run.copies == 0 and result.report.build["copies_left"] == 0
    unpacks = [params for name, params in kernel_signatures(result.opencl_source).items()
               if "layout_transform" in name and "__global float* restrict te_layout" in params]
    assert sum("image2d_array_t" in params for params in unpacks) == 1  # c's, not d's


def test_pool_kernels_keep_all_four_lanes():
    """TVM 0.27's Adreno Pool2D schedule wrote lane 3 into all four lanes."""
    x = np.zeros((1, 8, 16, 16), "float32")
    x[0, :, 3, 5] = np.arange(1, 9)  # one distinct peak per channel
    w = np.zeros((8, 8, 3, 3), "float32")
    w[np.arange(8), np.arange(8), 1, 1] = 1.0  # identity conv
    result = texscope.build(rules.MaxPool, "adreno-opencl")
    (pooled,) = opencl.run(result, [x, w]).outputs
    np.testing.assert_array_equal(pooled[0, :, 1, 2], np.arange(1, 9))


def test_a_wrongly_packed_image_is_caught(monkeypatch):
    """Write texels with their RGBA lanes reversed: the comparison must fail."""
    mod = opencl_cases.PackedInput
    result = texscope.build(mod, "adreno-opencl")
    inputs = verify.random_inputs(mod)
    assert read_program(result.module).inputs[0].tensor.is_texture
    expected = verify.reference_outputs(mod, inputs)
    assert verify.compare(opencl.run(result, inputs).outputs, expected, **TOLERANCE).ok

    packed = memory.texels
    monkeypatch.setattr(memory, "texels",
                        lambda array, spec: np.ascontiguousarray(packed(array, spec)[..., ::-1]))
    check = verify.compare(opencl.run(result, inputs).outputs, expected, **TOLERANCE)
    assert not check.ok and check.max_abs_error > 0.1


def test_a_kernel_reading_an_image_the_program_holds_in_a_buffer_is_an_error():
    result = texscope.build(rules.Seed, "adreno-opencl")
    stripped = attrs.evolve(result, module=verify.strip_scopes(result.module))
    with pytest.raises(texscope.TexscopeError, match=r"binding 'x_layout_transform'.*texture-nhwc"):
        opencl.run(stripped, verify.random_inputs(rules.Seed))


def wide_rows(width: int) -> tvm.IRModule:
    """Two convs over a map one row high and ``width`` pixels wide: the
    first's output is an image ``width`` texels wide."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 1, width), "float32"))
    w1 = relax.Var("w1", relax.TensorType((8, 8, 1, 3), "float32"))
    w2 = relax.Var("w2", relax.TensorType((8, 8, 1, 3), "float32"))
    with bb.function("main", [x, w1, w2]):
        with bb.dataflow():
            c = bb.emit(relax.op.nn.conv2d(x, w1, padding=(0, 1)))
            out = bb.emit_output(relax.op.nn.conv2d(c, w2, padding=(0, 1)))
        bb.emit_func_output(out)
    return bb.get()


def test_an_image_over_the_device_limits_is_a_clear_error():
    # Built for images twice as wide as the device in hand takes (PoCL's
    # limits follow the machine's memory: 8192 or 16384 texels a side).
    device = opencl.default_device()
    width = device.image2d_max_width
    target = dict(opencl.device_target(device, "adreno-opencl"),
                  texture_spatial_limit=2 * width)
    mod = wide_rows(width + 64)
    result = texscope.build(mod, target)
    widths = [memory.image_extent(s)[0] for step in read_program(result.module).steps
              for s in getattr(step, "tensors", ()) if s.is_texture]
    assert max(widths) == width + 64
    with pytest.raises(texscope.TexscopeError, match=f"over this device's {width} x"):
        opencl.run(result, verify.random_inputs(mod))


def test_host_workspaces_become_scratch_buffers():
    # A depthwise conv's padding kernel writes a scratch copy of the map
    # (other convs pad in registers: backend/conv_schedule.py).
    result = texscope.build(rules.Depthwise, "adreno-opencl")
    launches = kernel_launches(result.kernels)
    scratch = [a for ls in launches.values() for l in ls for a in l.args if isinstance(a, Workspace)]
    assert scratch and all(a.nbytes > 0 for a in scratch)


def test_run_on_opencl_compares_with_the_cpu():
    check = texscope.run_on_opencl(rules.Residual, "adreno-opencl")
    assert check.ok and check.outputs == 1 and check.max_abs_error < 1e-3


def test_run_on_opencl_scales_atol_by_the_outputs_magnitude(monkeypatch):
    """As ``texscope run`` compares: atol is a fraction of each output's
    largest magnitude, so a device returning zeros for an output whose
    elements are all below the absolute 1e-3 is a mismatch, and the same
    outputs scaled by 1e4 (float32 noise of that size) still match."""
    mod = rules.Residual
    inputs = verify.random_inputs(mod)
    expected = verify.reference_outputs(mod, inputs)
    real_run = opencl.run

    def device_outputs(scale, offset):
        def run(result, arrays, device=None):
            got = real_run(result, arrays, device)
            return attrs.evolve(got, outputs=tuple(o * scale + offset for o in got.outputs))
        return run

    tiny = [e * 1e-4 / float(np.abs(e).max()) for e in expected]
    monkeypatch.setattr(verify, "reference_outputs", lambda *_: tiny)
    factor = 1e-4 / float(np.abs(expected[0]).max())
    monkeypatch.setattr(opencl, "run", device_outputs(0.0, 0.0))  # all zeros: wrong
    assert not texscope.run_on_opencl(mod, "adreno-opencl", inputs).ok
    monkeypatch.setattr(opencl, "run", device_outputs(factor, 0.0))
    assert texscope.run_on_opencl(mod, "adreno-opencl", inputs).ok
    large = [e * 1e4 for e in expected]
    monkeypatch.setattr(verify, "reference_outputs", lambda *_: large)
    # Off by 1e-4 of the range everywhere: over an absolute 1e-3, within the scaled one.
    shift = 1e-4 * float(np.abs(large[0]).max())
    monkeypatch.setattr(opencl, "run", device_outputs(1e4, shift))
    assert shift > 1e-3 and texscope.run_on_opencl(mod, "adreno-opencl", inputs).ok


def test_a_vulkan_build_cannot_be_run_on_opencl():
    result = texscope.build(rules.Seed, "adreno-vulkan")
    with pytest.raises(texscope.TexscopeError, match="no OpenCL kernels"):
        opencl.run(result, verify.random_inputs(rules.Seed))


def test_cli_run_prints_errors_and_kernel_times(tmp_path, capsys):
    model = tmp_path / "model.py"
    model.write_text(
        "from tvm.script import ir as I, relax as R\n\n"
        "@I.ir_module\nclass Net:\n    @R.function\n"
        "    def main(x: R.Tensor((1, 8, 16, 16), 'float32'), w: R.Tensor((8, 8, 3, 3), 'float32')):\n"
        "        with R.dataflow():\n"
        "            c = R.nn.conv2d(x, w, padding=(1, 1))\n"
        "            gv = R.nn.relu(c)\n"
        "            R.output(gv)\n"
        "        return gv\n"
    )
    assert main(["run", str(model), "--target", "adreno-opencl"]) == 0
    out = capsys.readouterr().out
    assert "-> OK" in out and "max abs error" in out
    times = [float(line.split()[0]) for line in out.splitlines() if line.endswith("_kernel")
             or "_kernel" in line.split()[-1]]
    assert times and times == sorted(times, reverse=True)


def test_kernels_from_another_build_are_refused():
    """A stale kernels.cl: same kernel names, but pointers where images were."""
    result = texscope.build(rules.Seed, "adreno-opencl")
    no_textures = dict(opencl.device_target(), texture_spatial_limit=1, texture_depth_limit=1)
    stale = texscope.build(rules.Seed, no_textures).opencl_source
    assert "image2d" not in stale
    with pytest.raises(texscope.TexscopeError, match="declares `__global float"):
        opencl.run(attrs.evolve(result, opencl_source=stale), verify.random_inputs(rules.Seed))


def test_an_operator_the_build_did_not_lower_is_named():
    result = texscope.build(rules.Seed, "adreno-opencl")
    with pytest.raises(texscope.TexscopeError, match="binding 'gv'.*relax.nn.relu") as err:
        opencl.run(attrs.evolve(result, module=opencl_cases.NotLowered),
                   verify.random_inputs(opencl_cases.NotLowered))
    assert err.value.function == "main" and err.value.binding == "gv"


def test_kernels_the_opencl_compiler_rejects_are_a_texscope_error():
    result = texscope.build(rules.Seed, "adreno-opencl")
    broken = result.opencl_source.replace("write_imagef(", "write_image_nowhere(", 1)
    with pytest.raises(texscope.TexscopeError, match="rejects the kernels"):
        opencl.run(attrs.evolve(result, opencl_source=broken), verify.random_inputs(rules.Seed))


def test_a_float16_model_builds_half_texel_kernels():
    # TVM's Adreno conv compute writes float32 whatever the call asks, which
    # FuseTIR rejected; texscope's compute keeps the call's type.
    result = texscope.build(opencl_cases.Half, "adreno-opencl")
    assert "READ_IMAGEH" in result.opencl_source and "write_imageh" in result.opencl_source
    assert opencl.image_misuse(result.opencl_source) == []
    device = opencl.default_device()
    if "cl_khr_fp16" in device.extensions:
        _, run, expected = run_and_compare(opencl_cases.Half)
        assert verify.compare(run.outputs, expected, rtol=1e-2, atol=1e-2).ok
    else:  # PoCL on a CPU (and NVIDIA's OpenCL): no half support, said in one line
        with pytest.raises(texscope.TexscopeError, match="lacks cl_khr_fp16"):
            opencl.run(result, verify.random_inputs(opencl_cases.Half))


def test_a_kernel_that_packs_into_an_image_is_not_made_a_view():
    out = run_pass(KeepStorageChangesAsKernels, storage_views.PackIntoImage)
    tvm.ir.assert_structural_equal(out, storage_views.PackIntoImageKept)
    # TVM's reshape rewrite now leaves the image-writing call alone; the
    # buffer-to-buffer one still becomes a view.
    lowered = relax.transform.RewriteDataflowReshape()(out)
    values = [b.value for b in lowered["main"].body.blocks[0].bindings]
    assert values[0].op.name == "relax.call_tir" and values[1].op.name == "relax.reshape"


def test_keeping_a_storage_change_as_a_kernel_leaves_the_other_bindings_alone():
    """Only the image-writing call's variable changes; the buffer-to-buffer
    call's binding is the input's own object, not a rebuilt copy."""
    out = KeepStorageChangesAsKernels(storage_views.PackIntoImage)
    before = storage_views.PackIntoImage["main"].body.blocks[0].bindings
    after = out["main"].body.blocks[0].bindings
    assert not after[0].same_as(before[0]) and not isinstance(after[0].var, relax.DataflowVar)
    assert after[1].same_as(before[1])


@pytest.mark.parametrize("name", ["resnet", "mobilenet_v2"])
def test_mali_builds_compute_the_cpu_numbers_on_opencl(name):
    # TVM's texture schedules are registered for Adreno only; texscope applies
    # them on Mali too (the generic ones store scalars into texels).
    mod = NETWORKS[name]()
    result = texscope.build(mod, opencl.device_target(base="mali-opencl"))
    inputs = verify.random_inputs(mod)
    run = opencl.run(result, inputs)
    assert_close(run, verify.reference_outputs(mod, inputs))
    assert run.images > 0


@pytest.mark.parametrize("source, target", [
    ("global", "global.texture-nhwc"), ("global.texture-nhwc", "global"),
    ("global.texture-nhwc", "global.texture"), ("global.texture", "global.texture"),
])
def test_copies_between_storages_keep_every_element(source, target):
    cl = pyopencl()
    context = cl.Context([opencl.default_device()])
    mem = memory.DeviceMemory(cl, context, cl.CommandQueue(context))
    values = np.arange(2 * 3 * 5 * 7 * 4, dtype="float32").reshape(2, 3, 5, 7, 4)
    a = TensorSpec("a", values.shape, "float32", source)
    b = TensorSpec("b", values.shape, "float32", target)
    mem.upload(a, values)
    mem.copy(a, b)
    np.testing.assert_array_equal(mem.download(b), values)


def test_a_run_counts_the_memory_it_allocates():
    # A [1, 2, 3, 5, 4] float32 texture-weight image is 1 row of 2*3*5 = 30
    # texels of 16 bytes; a buffer of 7 float16 values is 14 bytes.
    image = TensorSpec("i", (1, 2, 3, 5, 4), "float32", "global.texture-weight")
    assert memory.allocation_bytes(image) == 30 * 16
    assert memory.allocation_bytes(TensorSpec("b", (7,), "float16", "global")) == 14
    result, run, expected = run_and_compare(rules.Depthwise)  # padded in scratch
    assert_close(run, expected)
    plan = opencl.plan_of(result)
    # Every tensor of the plan once, and every scratch buffer, for the whole run.
    scratch = {(s.binding, a.name): a.nbytes for s in plan.steps
               for a in getattr(s, "args", ()) if isinstance(a, PlanWorkspace)}
    assert scratch
    assert run.allocated_bytes == (sum(memory.allocation_bytes(t) for t in plan.tensors.values())
                                   + sum(scratch.values()))
