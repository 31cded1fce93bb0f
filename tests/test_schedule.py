"""texscope's legalizations and schedules: exact TIR, and kernels run on OpenCL."""

import attrs
import pytest
import tvm
from tvm import relax

import texscope
from conftest import ADRENO, BeforeScheduling, run_pass, tvms_thread_split
from modules import texel_cases
from texscope.knowledge import registry
from texscope.rewrites.legalize import REPLACED, once_per_signature
from texscope.opencl.program import KernelCall, read_program
from texscope.opencl.source import kernel_bodies
import tvm_ffi

from texscope.backend.schedules import kernels as schedule
from texscope.backend.schedules.kernels import EpilogueConv2d, TexelWriter, TextureFallback
from tvm.s_tir import dlight
from tvm.script import tirx as T
from texscope.models import zoo
from tvm.s_tir.schedule import _type_checker
from test_opencl_run import assert_close, run_and_compare


def test_a_layout_transform_is_legalized_as_an_injective_gather():
    out = run_pass(relax.transform.LegalizeOps(REPLACED), texel_cases.Pack)
    tvm.ir.assert_structural_equal(out, texel_cases.PackGathered)
    # TVM's own legalization scatters, which AnnotateTIROpPattern calls opaque.
    patterns = [relax.transform.AnnotateTIROpPattern()(mod)["te_layout_transform"].attrs["op_pattern"]
                for mod in (out, relax.transform.LegalizeOps()(texel_cases.Pack))]
    assert patterns == [2, 8]


def test_a_padding_layout_transform_keeps_tvms_legalization():
    ours = run_pass(relax.transform.LegalizeOps(REPLACED), texel_cases.PackPadded)
    tvm.ir.assert_structural_equal(ours, relax.transform.LegalizeOps()(texel_cases.PackPadded))


def test_the_texel_writer_schedules_a_padded_strided_pool():
    func = texel_cases.MaxPoolToTexture["max_pool2d"]
    schedule = TexelWriter().apply(func, ADRENO, False)
    tvm.ir.assert_structural_equal(schedule.mod["main"], texel_cases.MaxPoolScheduled["max_pool2d"])


def _no_type_checks(monkeypatch):
    def refuse(*_args):
        raise AssertionError("a Schedule method's arguments were type-checked in Python")

    monkeypatch.setattr(_type_checker, "_type_check", refuse)


def test_texscopes_rules_schedule_without_pythons_type_checks(monkeypatch):
    """The same TIR, with none of TVM's per-call Python argument checks (most
    of a real model's scheduling time)."""
    capture = BeforeScheduling()
    with tvm.transform.PassContext(instruments=[capture]):
        texscope.build(zoo.NETWORKS["resnet"](), "adreno-opencl")
    convs = [f for g, f in capture.module.functions.items() if "conv2d" in g.name_hint]
    pool = texel_cases.MaxPoolToTexture["max_pool2d"]
    split = texel_cases.TwoTextureOutputs["split"]  # left to the fallback
    with ADRENO:
        checked = [EpilogueConv2d().apply(f, ADRENO, False).mod for f in convs]
        with tvms_thread_split():
            tvms_fallback = dlight.adreno.Fallback().apply(split, ADRENO, False)
        _no_type_checks(monkeypatch)
        unchecked = [EpilogueConv2d().apply(f, ADRENO, False).mod for f in convs]
        pool_schedule = TexelWriter().apply(pool, ADRENO, False)
        fallback = TextureFallback().apply(split, ADRENO, False)
    assert len(convs) == 4
    tvm.ir.assert_structural_equal(fallback.mod, tvms_fallback.mod)
    for ours, theirs in zip(unchecked, checked):
        tvm.ir.assert_structural_equal(ours, theirs)
    tvm.ir.assert_structural_equal(pool_schedule.mod["main"],
                                   texel_cases.MaxPoolScheduled["max_pool2d"])
    monkeypatch.undo()
    _the_thread_check_stops_at_thread_loops(monkeypatch, [m["main"] for m in unchecked])


def _the_thread_check_stops_at_thread_loops(monkeypatch, kernels):
    """The check for texture stores off GPU threads walks none of the nodes
    under a thread-bound loop (over 1300 nodes per scheduled conv of the
    ResNet; some 40 lie above them)."""
    visited, visit = [], tvm_ffi.structural_visit

    def counting(node, callback):
        def count(value, visitor):
            visited.append(value)
            return callback(value, visitor)
        return visit(node, count)

    monkeypatch.setattr(schedule.tvm_ffi, "structural_visit", counting)
    for kernel in kernels:
        visited.clear()
        assert not schedule._texture_stores_off_threads(kernel)
        assert 0 < len(visited) < 100


def test_the_conv_rule_leaves_other_kernels_before_analysing_them(monkeypatch):
    def refuse(*_args):
        raise AssertionError("a kernel without a conv block was analysed")

    monkeypatch.setattr(dlight.analysis, "get_sblock_info", refuse)
    with ADRENO:
        assert EpilogueConv2d().apply(texel_cases.MaxPoolToTexture["max_pool2d"], ADRENO,
                                      False) is None


def test_rules_decline_what_they_cannot_take_before_building_a_schedule(monkeypatch):
    """A kernel with no conv block, one whose block is no layout transform,
    one holding no texture: declined from the PrimFunc (a Schedule costs
    about half a millisecond to build)."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("a Schedule was built for a kernel the rule cannot take")

    monkeypatch.setattr(schedule.UncheckedSchedule, "__init__", refuse)
    pool = texel_cases.MaxPoolToTexture["max_pool2d"]
    buffers_only = relax.transform.LegalizeOps()(texel_cases.PoolsBetweenConvs)["conv2d"]
    layout_transform = schedule.schedule_rules()[1]
    with ADRENO:
        assert EpilogueConv2d().apply(pool, ADRENO, False) is None
        assert layout_transform.apply(pool, ADRENO, False) is None
        assert TextureFallback().apply(buffers_only, ADRENO, False) is None


def _inception_kernels_before_scheduling() -> dict:
    capture = BeforeScheduling()
    with tvm.transform.PassContext(instruments=[capture]):
        texscope.build(zoo.NETWORKS["inception"](), "adreno-opencl", jobs=1)
    return {g.name_hint: f for g, f in capture.module.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc)}


def test_texture_rules_decline_a_kernel_reading_a_texture_into_a_buffer(monkeypatch):
    """The inception block's pool reads a texture and writes a buffer: the
    texel writer and the Adreno fallback decline it from its blocks."""
    pool = _inception_kernels_before_scheduling()["max_pool2d"]
    assert schedule._texture_params(pool)

    def refuse(*_args, **_kwargs):
        raise AssertionError("a Schedule was built for a kernel storing into no texture")

    monkeypatch.setattr(schedule.UncheckedSchedule, "__init__", refuse)
    with ADRENO:
        assert TexelWriter().apply(pool, ADRENO, False) is None
        assert TextureFallback().apply(pool, ADRENO, False) is None


def test_the_row_reduction_rule_is_not_asked_about_two_reductions():
    """A softmax reduces twice (its max, then its sum): TVM's Reduction rule
    declines it, after its analyses; here it is not asked."""
    softmax = _inception_kernels_before_scheduling()["softmax"]
    asked = []

    class Recording(dlight.gpu.Reduction):
        def apply(self, func, target, tunable):
            asked.append(func)
            return super().apply(func, target, tunable)

    target = tvm.target.Target("opencl")
    with target:
        assert schedule._reducing_blocks(softmax) == 2
        assert dlight.gpu.Reduction().apply(softmax, target, False) is None
        assert schedule._OnReductions(Recording(), most_blocks=1).apply(
            softmax, target, False) is None
        assert schedule._OnReductions(Recording()).apply(softmax, target, False) is None
    assert len(asked) == 1


def test_the_data_pad_check_asks_for_a_select_before_analysing_a_block(monkeypatch):
    """Every block of the zoo's kernels gets dlight's answer; a block without
    a select gets it without dlight's block analysis."""
    capture = BeforeScheduling()
    with tvm.transform.PassContext(instruments=[capture]):
        texscope.build(zoo.NETWORKS["resnet"](), "adreno-opencl")
    blocks, pads = [], 0
    for func in capture.module.functions.values():
        if isinstance(func, tvm.tirx.PrimFunc):
            sch = tvm.s_tir.Schedule(func)
            for block in sch.get_child_blocks(sch.get_sblock("root")):
                expected = dlight.analysis.get_sblock_info(sch, block).is_data_pad(sch)
                assert schedule._is_data_pad(sch, block) == expected
                blocks.append((sch, block))
                pads += expected
    assert pads and len(blocks) > pads
    analysed = []
    real = dlight.analysis.get_sblock_info
    monkeypatch.setattr(dlight.analysis, "get_sblock_info",
                        lambda sch, block: analysed.append(block) or real(sch, block))
    for sch, block in blocks:
        schedule._is_data_pad(sch, block)
    assert 0 < len(analysed) < len(blocks)


def test_the_texel_writer_takes_only_one_texture_output_on_texture_targets():
    rule = TexelWriter()
    assert rule.apply(texel_cases.TwoTextureOutputs["split"], ADRENO, False) is None
    assert rule.apply(texel_cases.CenterToTexture["center"], ADRENO, False) is None
    # A kernel writing a buffer is left to the other rules.
    assert rule.apply(texel_cases.PackGathered["te_layout_transform"], ADRENO, False) is None
    pool = texel_cases.MaxPoolToTexture["max_pool2d"]
    assert rule.apply(pool, tvm.target.Target("opencl"), False) is None
    assert rule.apply(pool, texscope.texture_target("mali-opencl").target, False) is not None


def _kernels_of(result, needle):
    calls = [s for s in read_program(result.module).steps
             if isinstance(s, KernelCall) and needle in s.function]
    return calls, kernel_bodies(result.opencl_source)


def test_pools_between_convs_write_textures_and_compute_the_cpu_numbers():
    result, run, expected = run_and_compare(texel_cases.PoolsBetweenConvs)
    assert_close(run, expected)
    pools, bodies = _kernels_of(result, "pool")
    assert len(pools) == 3 and all(p.tensors[-1].is_texture for p in pools)
    assert result.report.build["copies_left"] == 0
    for pool in pools:
        (body,) = [b for name, b in bodies.items() if name.startswith(pool.function)]
        # A texel of accumulators, one texel store.
        assert "float4" in body and body.count("write_imagef") == 1


def test_a_pool_on_a_guarded_thread_split_writes_whole_texels():
    """Its reduction, guarded, cannot be vectorized: its lanes stay scalars
    in registers, and the store still writes texels (the texel writer used
    to decline it, and TVM's Adreno fallback then failed midway)."""
    result, run, expected = run_and_compare(texel_cases.PoolOfUnevenTexels)
    assert_close(run, expected)
    (pool,), bodies = _kernels_of(result, "pool")
    assert pool.tensors[-1].is_texture
    (body,) = [b for name, b in bodies.items() if name.startswith(pool.function)]
    assert body.count("write_imagef") == 1


def test_a_rule_failing_midway_is_a_named_error():
    capture = BeforeScheduling()
    with tvm.transform.PassContext(instruments=[capture]):
        texscope.build(texel_cases.PoolOfUnevenTexels, "adreno-opencl")
    kernels = capture.module
    with pytest.raises(texscope.TexscopeError, match=r"could schedule kernel 'max_pool2d': one "
                       r"failed midway \(Error message: The buffer pool_max") as err:
        with ADRENO:
            schedule.ScheduleKernels(TextureFallback(), jobs=1)(kernels)
    assert err.value.function == "main" and err.value.binding is not None


def test_schedule_errors_are_short_unless_asked_for_in_full():
    """A failed primitive is how rules test a block (``try_inline``): its
    error is TVM's one-line message, not the kernel printed with the block
    underlined (0.8 ms a failure); in full where asked, on this thread only."""
    reduction = texel_cases.MaxPoolToTexture["max_pool2d"]

    def failed_inline() -> str:
        sch = schedule.UncheckedSchedule(reduction)
        block = [b for b in sch.get_child_blocks(sch.get_sblock("root"))
                 if "pool" in sch.get(b).name_hint][-1]
        with pytest.raises(tvm.s_tir.ScheduleError) as err:
            sch.compute_inline(block)
        return str(err.value)

    short = failed_inline()
    assert "\n" not in short.strip() and "The IR with diagnostic" not in short
    with schedule.detailed_schedule_errors():
        assert "The IR with diagnostic" in failed_inline()
    assert failed_inline() == short


def test_channel_padding_and_packing_are_one_kernel():
    result, run, expected = run_and_compare(texel_cases.RGBStem)
    assert_close(run, expected)
    steps = read_program(result.module).steps
    (pack,) = [s for s in steps if isinstance(s, KernelCall) and s.tensors[0].name == "x"]
    assert pack.tensors[-1].is_texture
    # pad+pack x, pad+pack w, conv, unpack (each pad used to be a kernel of its own)
    assert sum(isinstance(s, KernelCall) for s in steps) == 4


def test_each_operator_signature_is_legalized_once():
    default = tvm.ir.Op.get("relax.expand_dims").get_attr("FLegalize")
    legalized = []

    def counting(bb, call):
        legalized.append(call)
        return default(bb, call)

    table = {"relax.expand_dims": once_per_signature(counting)}
    out = run_pass(relax.transform.LegalizeOps(table), texel_cases.TwinCalls)
    # x and y share a signature; the other axis and the constant are legalized anew.
    assert len(legalized) == 3
    tvm.ir.assert_structural_equal(out, relax.transform.LegalizeOps()(texel_cases.TwinCalls))


def test_layer_norm_writes_a_buffer_and_computes_the_cpu_numbers():
    result, run, expected = run_and_compare(texel_cases.LayerNormBetweenConvs)
    assert_close(run, expected)
    (norm,) = [s for s in read_program(result.module).steps
               if isinstance(s, KernelCall) and "layer_norm" in s.function]
    assert not norm.tensors[-1].is_texture


@pytest.fixture
def layer_norm_offering_textures():
    saved = list(registry._user_entries)
    registry.register_op(attrs.evolve(
        next(e for e in registry.BUILTIN if e.name == "layer_norm"), outputs=(registry.ANY,)))
    yield
    registry._user_entries[:] = saved


@pytest.mark.usefixtures("layer_norm_offering_textures")
def test_a_texture_kernel_no_schedule_puts_on_threads_is_a_named_error():
    # Before the check, TVM compiled such a kernel for the host and crashed
    # in LLVM codegen on texture2d_store.
    with pytest.raises(texscope.TexscopeError, match="on GPU threads") as err:
        texscope.build(texel_cases.LayerNormBetweenConvs, "adreno-opencl")
    assert err.value.function == "main" and err.value.binding is not None


def test_a_layout_transform_tvms_adreno_rule_cannot_schedule_goes_to_the_next_rule():
    func = texel_cases.half_unpack
    with ADRENO, pytest.raises(TypeError, match="split"):
        dlight.adreno.LayoutTransform().apply(func, ADRENO, False)
    with ADRENO:
        scheduled = schedule.ScheduleKernels(*schedule.schedule_rules(), jobs=1)(
            tvm.IRModule({"unpack": func}))
    # The generic fallback took it: its loop runs on GPU threads.
    assert "T.thread_binding" in scheduled["unpack"].script()
    assert scheduled["unpack"].attrs["tirx.is_scheduled"]


def test_reduction_rules_see_only_kernels_that_reduce():
    """On the inception block's kernels, a kernel without a reduction
    iterator is one TVM's reduction rules decline; the wrapped rules are not
    asked about it, and are asked (and answer as TVM's) about the others."""
    capture = BeforeScheduling()
    with tvm.transform.PassContext(instruments=[capture]):
        texscope.build(zoo.NETWORKS["inception"](), "adreno-opencl")
    kernels = [f for f in capture.module.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    target = tvm.target.Target("opencl")
    asked = []

    class Recording(dlight.gpu.Reduction):
        def apply(self, func, target, tunable):
            asked.append(func)
            return super().apply(func, target, tunable)

    wrapped = schedule._OnReductions(Recording())
    spatial = 0
    for func in kernels:
        sch = tvm.s_tir.Schedule(func)
        blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
        reduces = any(int(iv.iter_type) == tvm.tirx.IterVar.CommReduce
                      for block in blocks for iv in block.iter_vars)
        assert (schedule._reducing_blocks(func) > 0) == reduces
        with target:
            ours = wrapped.apply(func, target, False)
            theirs = dlight.gpu.Reduction().apply(func, target, False)
            if not reduces:
                spatial += 1
                assert theirs is None
                assert dlight.gpu.GeneralReduction().apply(func, target, False) is None
        assert (ours is None) == (theirs is None)
        if ours is not None:
            tvm.ir.assert_structural_equal(ours.mod, theirs.mod)
    assert 0 < spatial < len(kernels)
    assert len(asked) == len(kernels) - spatial


@pytest.mark.parametrize("mod", [zoo.NETWORKS["resnet"], lambda: texel_cases.PoolsBetweenConvs,
                                 lambda: texel_cases.RGBStem])
def test_the_texel_writer_guards_its_thread_split_as_split_does(mod, monkeypatch,
                                                              tvms_thread_count):
    """The texel computed at its loop, then that loop split unguarded and the
    guard appended, is the schedule a guarded split of that loop makes (on
    TVM's 256 threads, which leave a remainder more often than whole rows)."""
    capture = BeforeScheduling()
    with tvm.transform.PassContext(instruments=[capture]):
        texscope.build(mod(), "adreno-opencl")
    target = texscope.texture_target("adreno-opencl").target
    kernels = [f for f in capture.module.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    with target:
        ours = [TexelWriter().apply(f, target, False) for f in kernels]
        guarded = []

        def split_guarded(sch, loop, threads, _blocks):
            block_x, thread_x = sch.split(loop, [None, threads])
            guarded.append("T.where" in sch.mod.script())
            sch.bind(block_x, "blockIdx.x")
            sch.bind(thread_x, "threadIdx.x")
            return block_x, thread_x

        monkeypatch.setattr(schedule, "split_over_threads", split_guarded)
        theirs = [TexelWriter().apply(f, target, False) for f in kernels]
    taken = [(a, b) for a, b in zip(ours, theirs) if a is not None]
    assert taken and len(taken) == sum(b is not None for b in theirs)
    assert any(guarded)
    for a, b in taken:
        tvm.ir.assert_structural_equal(a.mod, b.mod)


def test_the_texel_writer_computes_at_the_texel_loop_not_a_thread(monkeypatch):
    """Computed at a thread loop whose split leaves a remainder, the texel's
    loops would be checked against its buffer through Z3 (guards.py)."""
    kernels = _kernels_before_scheduling("resnet")
    at = []
    compute_at = schedule.UncheckedSchedule.compute_at

    def recording(self, block, loop, *args, **kwargs):
        at.append(self.get(loop).thread_binding)
        return compute_at(self, block, loop, *args, **kwargs)

    monkeypatch.setattr(schedule.UncheckedSchedule, "compute_at", recording)
    target = texscope.texture_target("adreno-opencl").target
    with target:
        taken = [f for f in kernels if TexelWriter().apply(f, target, False) is not None]
    assert taken and at and all(binding is None for binding in at)


def _kernels_before_scheduling(*names: str) -> list:
    kernels = []
    for name in names:
        capture = BeforeScheduling()
        with tvm.transform.PassContext(instruments=[capture]):
            texscope.build(zoo.NETWORKS[name](), "adreno-opencl")
        kernels += [f for f in capture.module.functions.values()
                    if isinstance(f, tvm.tirx.PrimFunc)]
    return kernels


def test_reduction_rules_are_spared_kernels_whose_form_they_decline():
    """What ``Reduction`` and ``GeneralReduction`` need, asked of the blocks
    first: where the answer is no, TVM's rule declines the kernel too (on
    every reducing kernel of the inception block and the MobileNetV2-style
    network), and the wrapped rule is not asked; the max pool is spared
    both."""
    target = tvm.target.Target("opencl")
    general = schedule._NoneOnScheduleError(dlight.gpu.GeneralReduction())
    asked = []

    class Recording(dlight.ScheduleRule):
        def __init__(self, rule):
            self.rule = rule

        def is_target_available(self, target):
            return self.rule.is_target_available(target)

        def apply(self, func, target, tunable):
            asked.append((type(self.rule).__name__, func))
            return self.rule.apply(func, target, tunable)

    row = schedule._OnReductions(Recording(dlight.gpu.Reduction()), most_blocks=1,
                                 needs=schedule.sums_into_itself)
    rest = schedule._OnReductions(Recording(general),
                                  needs=schedule.ends_in_an_element_wise_block)
    reducing, spared = 0, {"row": 0, "rest": 0}
    for func in _kernels_before_scheduling("inception", "mobilenet_v2"):
        blocks = schedule._blocks(func)
        if not schedule._reducing_blocks(func):
            continue
        reducing += 1
        with target:
            if not schedule.sums_into_itself(blocks):
                spared["row"] += 1
                assert dlight.gpu.Reduction().apply(func, target, False) is None
                assert row.apply(func, target, False) is None
                assert not any(n == "Reduction" and f.same_as(func) for n, f in asked)
            if not schedule.ends_in_an_element_wise_block(blocks):
                spared["rest"] += 1
                assert general.apply(func, target, False) is None
                assert rest.apply(func, target, False) is None
                assert not any(n == "_NoneOnScheduleError" and f.same_as(func) for n, f in asked)
    pool = _inception_kernels_before_scheduling()["max_pool2d"]
    blocks = schedule._blocks(pool)
    assert not schedule.sums_into_itself(blocks)
    assert not schedule.ends_in_an_element_wise_block(blocks)
    # Kernels that sum (a mean's pool, a dense layer) and a softmax still reach them.
    assert reducing > spared["row"] > 0 and reducing > spared["rest"] > 0


def test_the_build_schedules_a_max_pool_without_asking_the_reduction_rules(monkeypatch):
    pool = _inception_kernels_before_scheduling()["max_pool2d"]
    asked = []
    for rule in (dlight.gpu.Reduction, dlight.gpu.GeneralReduction):
        monkeypatch.setattr(rule, "apply", lambda self, *args: asked.append(self) or None)
    with ADRENO:
        scheduled = schedule.ScheduleKernels(*schedule.schedule_rules(), jobs=1)(
            tvm.IRModule({"max_pool2d": pool}))
    assert scheduled["max_pool2d"].attrs["tirx.is_scheduled"]
    assert asked == []


def test_a_sum_then_an_element_wise_block_is_what_both_reduction_rules_may_take():
    @tvm.script.ir_module
    class Mean:
        @T.prim_func(s_tir=True)
        def main(a: T.Buffer((4, 64), "float32"), out: T.Buffer((4,), "float32")):
            total = T.sblock_alloc_buffer((4,))
            for i, k in T.grid(4, 64):
                with T.sblock("total"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    with T.init():
                        total[vi] = T.float32(0)
                    total[vi] = total[vi] + a[vi, vk]
            for i in range(4):
                with T.sblock("mean"):
                    vi = T.axis.remap("S", [i])
                    out[vi] = total[vi] / T.float32(64)

    blocks = schedule._blocks(Mean["main"])
    assert schedule.sums_into_itself(blocks)
    assert schedule.ends_in_an_element_wise_block(blocks)
    assert not schedule.ends_in_an_element_wise_block(blocks[:1])
