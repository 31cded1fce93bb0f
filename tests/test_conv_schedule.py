"""The packed conv's schedule (texscope.backend.schedules.conv) against TVM's
own Adreno Conv2d rule: the same scheduled kernel, on every conv kernel of
the zoo (and, under ``real_models``, of every importable MediaPipe model),
for both targets' channel counts, guards and data pads (TVM's rule given
texscope's tiles and, where texscope pads in registers, the padding block
as its register cache)."""

from unittest import mock

import pytest
import tvm
from tvm import s_tir
from tvm.s_tir import dlight
from tvm.script import ir as I, relax as R
from tvm.s_tir.dlight.adreno import convolution as tvms_convolution

import texscope
from texscope import opencl
from texscope.diagnostics import verify
from conftest import ADRENO, BeforeScheduling, tvms_thread_split
from modules import texel_cases
from test_tflite import IMPORTABLE
from texscope.backend.schedules import conv as conv_schedule, fallback as fallback_schedule, kernels as schedule
from texscope.backend.schedules.kernels import EpilogueConv2d
from texscope.frontend.tflite_model import load_tflite
from texscope.ir.tir import blocks_in
from texscope.opencl.source import kernel_bodies, kernel_signatures
from texscope.models import zoo


def _conv_kernels(mod) -> list:
    capture = BeforeScheduling()
    with tvm.transform.PassContext(instruments=[capture]):
        texscope.build(mod, "adreno-opencl")
    # A conv with one product per output (a 1x1 depthwise conv) is
    # element-wise by then (texscope.backend.schedules.unit_reduction): no conv to schedule.
    return [func for func in capture.module.functions.values()
            if isinstance(func, tvm.tirx.PrimFunc)
            and conv_schedule.CONV_BLOCK in func.script() and schedule._reducing_blocks(func)]


_SPLIT = s_tir.Schedule.split


def _split_as_texscope_tiles(self, loop, factors, *args, **kwargs):
    """TVM's rule's split, its 16-thread row and column tiles texscope's."""
    if list(factors) == [None, 1, 16]:
        factors = [None, 1, conv_schedule.spatial_tile(self.get(loop).extent)]
    return _SPLIT(self, loop, factors, *args, **kwargs)


_CACHE_READ = s_tir.Schedule.cache_read
_SCHEDULE_DEFAULT = tvms_convolution.schedule_default


def _cache_read_as_texscope(self, block, index, scope, *args, **kwargs):
    """TVM's rule's register cache of the conv's input: the padding block
    itself where texscope computes the padding in registers."""
    padding = conv_schedule.register_padding(self, block) if index == 0 else None
    if padding is None:
        return _CACHE_READ(self, block, index, scope, *args, **kwargs)
    self.set_scope(padding, 0, scope)
    return padding


def _default_schedule_but_register_caches(sch, blocks):
    """TVM's rule's default schedule of the blocks left over, the padding
    block computed in registers under the conv's loops not among them."""
    return _SCHEDULE_DEFAULT(sch, [b for b in blocks if sch.get(b).writes[0].source.scope()
                                   != "local"])


def _tvms_schedule(func):
    """EpilogueConv2d's inlining, then TVM's Adreno Conv2d rule with
    texscope's row and column tiles (conv_schedule.spatial_tile), padding
    in registers (conv_schedule.register_padding) and, for the blocks it
    gives its default schedule, blocks of whole rows (thread_blocks)."""
    with mock.patch.object(s_tir.Schedule, "split", _split_as_texscope_tiles), \
            mock.patch.object(s_tir.Schedule, "cache_read", _cache_read_as_texscope), \
            mock.patch.object(tvms_convolution, "schedule_default",
                              _default_schedule_but_register_caches), \
            tvms_thread_split():
        return _tvms_rule(func)


def _tvms_rule(func):
    sch = s_tir.Schedule(func)
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        if (schedule._is_spatial(sch, block) and not schedule._writes_any(sch, block, func.params)
                and not schedule._pads_conv_input(sch, block)):
            try:
                sch.compute_inline(block)
            except s_tir.ScheduleError:
                pass
    return dlight.adreno.Conv2d().apply(sch, ADRENO, False)


def _off_threads(sch) -> list:
    return [block for block in sch.get_child_blocks(sch.get_sblock("root"))
            if not any(sch.get(loop).thread_binding is not None for loop in sch.get_loops(block))]


def _assert_tvms_schedule(kernels) -> None:
    """Ours is TVM's, but for the blocks TVM's inlining helper drops (left
    off the threads), which get the default schedule (see the squeeze and
    excitation test)."""
    with ADRENO:
        for func in kernels:
            ours = EpilogueConv2d().apply(func, ADRENO, False)
            tvms = _tvms_schedule(func)
            for dropped in _off_threads(tvms):
                fallback_schedule.schedule_default(tvms, dropped)
            tvm.ir.assert_structural_equal(ours.mod, tvms.mod)


def _guards(kernels) -> set:
    """Which of the four splits of the kernels' convs leave a remainder."""
    found = set()
    for func in kernels:
        script = "\n".join(line for line in EpilogueConv2d().apply(func, ADRENO, False).mod.script()
                           .splitlines() if "T.where(" in line)
        found |= {part for part, text in (("channels", "_fused % "), ("rows", "* T.int64(16) + "),
                                          ("texels", "_0 * T.int64(4) + ")) if text in script}
    return found


def test_the_zoos_convs_get_tvms_schedule():
    kernels = [k for name in ("resnet", "mobilenet_v2", "unet", "inception", "chain64")
               for k in _conv_kernels(zoo.NETWORKS[name]())]
    assert len(kernels) >= 20
    _assert_tvms_schedule(kernels)


def test_guards_of_every_split_are_appended_as_split_appends_them(mediapipe):
    # face_detection_short_range: 5x5 stem, depthwise (one input channel: the
    # texel split guards), output channel counts not a multiple of 8; its
    # maps, 64 to 8 pixels, tile without a remainder.
    kernels = _conv_kernels(load_tflite(mediapipe["face_detection_short_range"]))
    assert _guards(kernels) == {"channels", "texels"}
    _assert_tvms_schedule(kernels)
    # A 34 x 34 map has no divisor from 8 to 16: 16 rows, guarded.
    odd = _conv_kernels(zoo.conv_chain(length=1, channels=8, image=34))
    assert _guards(odd) == {"rows"}
    _assert_tvms_schedule(odd)


@pytest.mark.parametrize("extent, tile", [(3, 3), (7, 7), (16, 16), (24, 12), (28, 14),
                                          (56, 14), (96, 16), (112, 16), (34, 16), (17, 16)])
def test_rows_and_columns_tile_by_a_divisor_of_the_map_where_one_fits(extent, tile):
    assert conv_schedule.spatial_tile(tvm.tirx.IntImm("int64", extent)) == tile


def test_a_kernel_without_one_packed_conv_is_declined():
    pool = texel_cases.MaxPoolToTexture["max_pool2d"]  # a reduction, not a conv
    split = texel_cases.TwoTextureOutputs["split"]  # no reduction
    for func in (pool, split):
        assert conv_schedule.schedule_packed_conv(s_tir.Schedule(func)) is None
        assert dlight.adreno.Conv2d().apply(func, ADRENO, False) is None


@pytest.mark.real_models
@pytest.mark.parametrize("name", IMPORTABLE)
def test_a_real_models_convs_get_tvms_schedule(mediapipe, name):
    _assert_tvms_schedule(_conv_kernels(load_tflite(mediapipe[name])))


def test_no_split_of_the_conv_schedule_guards_the_blocks_itself(split_recorder):
    """The guards go on in one replacement: each guarded split would first
    fail to prove its guard needless, through Z3 (most of a conv's schedule
    time)."""
    kernels = _conv_kernels(zoo.NETWORKS["resnet"]())
    calls = split_recorder()
    with ADRENO:
        for func in kernels:
            EpilogueConv2d().apply(func, ADRENO, False)
    # Four per conv: resnet's padding is computed in registers, with no
    # kernel of its own to split (the default schedule's split of it, 3364
    # texels on 256 threads, left a remainder).
    assert kernels and len(calls) == 4 * len(kernels) and all(calls)


def _blocks_off_threads(func) -> list[str]:
    sch = s_tir.Schedule(func)
    return [sch.get(block).name_hint for block in _off_threads(sch)]


def test_a_conv_gate_times_a_larger_map_is_scheduled_on_threads():
    """TVM's rule inlines the conv's epilogue; its helper fails to inline the
    product with the larger map into the conv's output, then drops that
    block from those it schedules: a sequential loop writing a texture (an
    "unknown intrinsic texture2d_load" from the build).  texscope gives it
    TVM's default schedule, and the kernel computes the CPU's numbers."""
    from test_opencl_run import assert_close, run_and_compare  # pylint: disable=import-outside-toplevel

    (func,) = _conv_kernels(texel_cases.SqueezeExcitation)
    with ADRENO:
        assert _blocks_off_threads(_tvms_schedule(func).mod["main"]) == ["T_multiply"]
        ours = EpilogueConv2d().apply(func, ADRENO, False).mod["main"]
    assert _blocks_off_threads(ours) == []
    _assert_tvms_schedule([func])
    result, run, expected = run_and_compare(texel_cases.SqueezeExcitation)
    assert_close(run, expected)
    assert result.report.build["copies_left"] == 0 and run.images >= 2


def test_a_conv_whose_epilogue_reads_its_input_caches_only_the_convs_reads():
    # TVM's rule sends every reader of the input through the register cache
    # and then fails to compute it at the conv's loop.
    from test_opencl_run import assert_close, run_and_compare  # pylint: disable=import-outside-toplevel

    result, run, expected = run_and_compare(texel_cases.OneByOneResidual)
    assert_close(run, expected)
    assert result.report.build["convs_reading_texture"] == 2


@I.ir_module
class ConvThenDepthwise:
    @R.function
    def main(x: R.Tensor((1, 8, 16, 16), "float32"), w: R.Tensor((8, 8, 3, 3), "float32"),
             dw: R.Tensor((8, 1, 3, 3), "float32")):
        with R.dataflow():
            y = R.nn.conv2d(x, w, padding=1)
            z = R.nn.conv2d(y, dw, padding=1, groups=8)
            R.output(z)
        return z


def _allocations(func) -> dict[str, str]:
    with ADRENO:
        scheduled = EpilogueConv2d().apply(func, ADRENO, False).mod["main"]
    assert s_tir.analysis.verify_well_formed(scheduled)
    return {buffer.name: buffer.scope() for block in blocks_in(scheduled.body)
            for buffer in block.alloc_buffers}


def test_a_convs_padding_is_its_register_cache_but_a_depthwise_convs():
    """The conv's zero padding is computed texel by texel into the
    registers the conv reads (no scratch buffer, no kernel of its own); a
    depthwise conv keeps TVM's padding kernel; both compute the CPU's
    numbers."""
    from test_opencl_run import assert_close, run_and_compare  # pylint: disable=import-outside-toplevel

    conv, depthwise = _conv_kernels(ConvThenDepthwise)
    assert _allocations(conv) == {"conv2d_data_pad_local": "local",
                                  "conv2d_NCHWc_OIHWo_local": "local"}
    assert _allocations(depthwise) == {"conv2d_data_pad": "global",
                                       "conv2d_data_pad_local": "local",
                                       "conv2d_NCHWc_OIHWo_local": "local"}
    result, run, expected = run_and_compare(ConvThenDepthwise)
    assert_close(run, expected)
    # Two kernels for the depthwise conv (padding, conv), one for the other.
    assert sum(name.startswith(("conv2d", "fused_conv2d")) for name in
               kernel_signatures(result.opencl_source)) == 3


def test_the_nvidia_preset_pads_a_depthwise_conv_in_registers_and_keeps_maps_2d():
    """The ``nvidia`` preset's data: no padding kernel (one kernel a conv,
    no scratch buffer), feature maps in ``global.texture`` (rows and columns
    the image's), weights in ``global.texture-weight``; the CPU's numbers."""
    from test_opencl_run import assert_close  # pylint: disable=import-outside-toplevel

    target = opencl.device_target(base="nvidia-opencl")
    result = texscope.build(ConvThenDepthwise, target, profile=_maps_in_images("nvidia-opencl"))
    assert sum(name.startswith(("conv2d", "fused_conv2d")) for name in
               kernel_signatures(result.opencl_source)) == 2
    plan = opencl.plan_of(result)
    assert not [a for s in plan.steps for a in getattr(s, "args", ()) if hasattr(a, "nbytes")]
    scopes = {spec.name: spec.scope for spec in plan.tensors.values()}
    assert (scopes["y"], scopes["w_layout_transform"]) == ("global.texture", "global.texture-weight")
    inputs = verify.random_inputs(ConvThenDepthwise)
    assert_close(opencl.run(result, inputs), verify.reference_outputs(ConvThenDepthwise, inputs))
    adreno = opencl.plan_of(texscope.build(ConvThenDepthwise, "adreno-opencl"))
    assert adreno.spec("y").scope == "global.texture-weight"


def _one_by_one_conv(cin: int = 32, cout: int = 64, size: int = 8):
    import numpy as np  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    weight = np.random.default_rng(0).normal(0, cin ** -0.5, (cout, cin, 1, 1)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, cin, size, size), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit(relax.op.nn.conv2d(x, relax.const(weight))))
        bb.emit_func_output(out)
    return bb.get()


def test_the_nvidia_preset_gives_each_thread_one_output_channel_block():
    """Adreno's threads compute 8 output channel blocks each (TVM's rule);
    the ``nvidia`` preset's one, with 8 times the threads; the CPU's
    numbers both ways."""
    from test_opencl_run import assert_close  # pylint: disable=import-outside-toplevel

    mod = _one_by_one_conv()
    inputs = verify.random_inputs(mod)
    expected = verify.reference_outputs(mod, inputs)
    threads = {}
    for preset in ("adreno-opencl", "nvidia-opencl"):
        result = texscope.build(mod, opencl.device_target(base=preset))
        conv = next(s for s in opencl.plan_of(result).steps
                    if getattr(s, "kernel", "").startswith(("conv2d", "fused_conv2d")))
        threads[preset] = conv.global_size[0] * conv.global_size[1] * conv.global_size[2]
        assert_close(opencl.run(result, inputs), expected)
    assert threads["nvidia-opencl"] == 8 * threads["adreno-opencl"]


def _grouped_conv(channels: int, size: int, kernel: int, groups: int, cout: int | None = None):
    """x -> conv2d (same padding) with a constant weight of 1/sqrt(fan-in) scale."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    cout = cout or channels
    fan_in = channels // groups * kernel * kernel
    weight = np.random.default_rng(1).normal(0, fan_in ** -0.5,
                                             (cout, channels // groups, kernel, kernel))
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, channels, size, size), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = relax.op.nn.conv2d(x, relax.const(weight.astype("float32")),
                                      padding=kernel // 2, groups=groups)
            out = bb.emit_output(bb.emit(conv))
        bb.emit_func_output(out)
    return bb.get()


def _conv_input_registers(result) -> int:
    """Floats of the register cache the (one) conv kernel of a build reads
    its input into: the conv's input cache, not its accumulators."""
    import re  # pylint: disable=import-outside-toplevel

    kernels = [body for body in re.findall(r"__kernel void \w*conv2d\w*\([^)]*\) \{\n(.*?)\n\}",
                                           result.opencl_source, re.S)
               if re.search(r"float conv2d_NCHWc\w*_local_ptr\[", body)]  # not a padding kernel
    assert len(kernels) == 1
    arrays = dict(re.findall(r"float (\w+)_ptr\[(\d+)\];", kernels[0]))
    inputs = [int(n) for name, n in arrays.items() if not name.startswith("conv2d_NCHWc")]
    assert len(inputs) == 1, arrays
    return inputs[0]


_BUFFERS_ONLY = {"texture_spatial_limit": 0, "texture_depth_limit": 0}


def _maps_in_images(preset: str):
    """``preset``'s profile with every eligible map in an image (the nvidia
    profile, measured, keeps 1x1 and depthwise convs' maps in buffers): the
    schedules of convs reading images are what these tests look at."""
    return texscope.texture_target(preset).profile.with_map_gains(
        10.0, 10.0, "tests: every eligible map in an image")


@pytest.mark.parametrize("case, adreno, nvidia_buffers, nvidia_images", [
    # 16 channel blocks: 16 texels ahead from an image, one from a buffer.
    ((64, 8, 1, 1), 4, 4, 64),
    # 10 blocks: the largest divisor of 10 up to 16, all of them.
    ((40, 8, 1, 1), 4, 4, 40),
    # 3x3: all 9 taps ahead.
    ((16, 8, 3, 1), 4, 4, 36),
    # Depthwise 3x3: one texel a tap (TVM's rule two, for each of its 8
    # virtual threads on Adreno), all 9 ahead.
    ((16, 8, 3, 16), 64, 4, 36),
    # Depthwise 5x5: 25 taps are over 16, a row of 5 ahead.
    ((16, 8, 5, 16), 64, 4, 20),
])
def test_a_conv_reading_an_image_fetches_texels_ahead_on_the_nvidia_preset(
        case, adreno, nvidia_buffers, nvidia_images):
    """The ``nvidia`` preset's conv reading its input from an image fetches
    up to 16 texels before it sums them (``conv_texels_ahead``): channel
    blocks of a 1x1 conv, taps of a larger one; from a buffer one at a
    time, as TVM's rule.  A depthwise conv reads one texel a tap there
    (``conv_exact_texels``), TVM's rule (Adreno) two.  The register cache
    the conv reads its input into, in floats, well-formed kernels, and the
    CPU's numbers."""
    from test_opencl_run import assert_close  # pylint: disable=import-outside-toplevel

    mod = _grouped_conv(*case)
    inputs = verify.random_inputs(mod)
    expected = verify.reference_outputs(mod, inputs)
    nvidia = opencl.device_target(base="nvidia-opencl")
    builds = {"adreno": (opencl.device_target(base="adreno-opencl"), adreno),
              "nvidia, buffers": (dict(nvidia, **_BUFFERS_ONLY), nvidia_buffers),
              "nvidia, images": (nvidia, nvidia_images)}
    for name, (target, floats) in builds.items():
        result = texscope.build(mod, target, profile=_maps_in_images(f"{name.split(',')[0]}-opencl"))
        assert all(s_tir.analysis.verify_well_formed(func)
                   for func in result.kernels.functions.values()
                   if isinstance(func, tvm.tirx.PrimFunc))
        assert (name, _conv_input_registers(result)) == (name, floats)
        assert_close(opencl.run(result, inputs), expected)


@pytest.mark.parametrize("extent, ahead, split", [
    (16, 16, 16), (64, 16, 16), (10, 16, 10), (12, 8, 6), (7, 4, 1), (32, 1, 1), (1, 16, 1)])
def test_texels_ahead_split_divides_the_reduction(extent, ahead, split):
    assert conv_schedule.texels_ahead_split(tvm.tirx.IntImm("int64", extent), ahead) == split


def test_a_pool_writing_a_buffer_gets_a_thread_per_texel(mediapipe):
    """hand_recrop's pools (three fused with a channel pad) writing buffers:
    one thread per output texel and one vector store, as when they write
    images, not TVM's generic reduction across 256 threads (eleven barriers
    a kernel); the CPU's numbers."""
    from test_opencl_run import assert_close  # pylint: disable=import-outside-toplevel

    mod = load_tflite(mediapipe["hand_recrop"])
    target = dict(opencl.device_target(base="adreno-opencl"), texture_spatial_limit=1,
                  texture_depth_limit=1)
    result = texscope.build(mod, target)
    pools = {name: body for name, body in kernel_bodies(result.opencl_source).items()
             if "max_pool2d" in name}
    assert len(pools) == 6
    assert all("barrier(" not in body and body.count("vstore4") == 1 for body in pools.values())
    inputs = verify.random_inputs(mod)
    assert_close(opencl.run(result, inputs), verify.reference_outputs(mod, inputs))


def _pools(size: int):
    """x -> 1x1 conv (so that the map is packed) -> global average pool
    (split into rows, then columns, by texscope.rewrites.global_pool) and,
    apart, a 2 x 2 max pool."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    weight = np.random.default_rng(3).normal(0, 0.25, (16, 16, 1, 1)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 16, size, size), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = bb.emit(relax.op.nn.conv2d(x, relax.const(weight)))
            mean = bb.emit(relax.op.nn.adaptive_avg_pool2d(conv, output_size=(1, 1)))
            top = bb.emit(relax.op.nn.max_pool2d(conv, pool_size=(2, 2), strides=(2, 2)))
            out = bb.emit_output(relax.Tuple([mean, top]))
        bb.emit_func_output(out)
    return bb.get()


def test_a_pool_of_long_windows_writing_a_buffer_reduces_across_threads_on_nvidia():
    """A pool writing a buffer takes a thread per texel up to the preset's
    ``texel_pool_window`` values a window (Adreno's 64, the nvidia
    preset's 16): the split global pool's 32-texel rows and columns reduce
    across threads (a barrier) on nvidia, on one thread each on Adreno; the
    2 x 2 max pool on one thread on both; the CPU's numbers."""
    from test_opencl_run import assert_close  # pylint: disable=import-outside-toplevel

    mod = _pools(32)
    inputs = verify.random_inputs(mod)
    expected = verify.reference_outputs(mod, inputs)
    across = {}
    for preset in ("adreno-opencl", "nvidia-opencl"):
        result = texscope.build(mod, dict(opencl.device_target(base=preset), **_BUFFERS_ONLY))
        assert all(s_tir.analysis.verify_well_formed(func)
                   for func in result.kernels.functions.values()
                   if isinstance(func, tvm.tirx.PrimFunc))
        bodies = kernel_bodies(result.opencl_source)
        across[preset] = sorted(name for name, body in bodies.items()
                                if "pool" in name and "barrier(" in body)
        assert all("barrier(" not in body for name, body in bodies.items() if "max_pool" in name)
        assert_close(opencl.run(result, inputs), expected)
    assert across["adreno-opencl"] == []
    assert len(across["nvidia-opencl"]) == 2, across
