"""Kernel schedules: TVM's Adreno dlight rules where they are right, the
generic GPU rules elsewhere, and the fixes that make either write whole texels.

Each choice here was made by running the kernels on OpenCL (PoCL):

- ``dlight.adreno.Pool2D`` is not used: in TVM 0.27 it keeps one float of
  accumulator for a 4-lane texel, so every NCHW4c pool output holds lane 3's
  value four times.
- Texture-writing kernels that no other rule takes go to
  ``dlight.adreno.Fallback``, never to the generic GPU fallback: that one
  stores one lane per thread, a scalar where ``write_imagef`` takes a texel.
- TVM registers the Adreno rules for the "adreno" key only; without them a
  Mali build computed wrong numbers, so they apply to every texture target.
- Pools, fused pad-then-pack kernels and other kernels with one texture
  output go to texscope's :class:`TexelWriter` first: TVM's Adreno fallback
  fails on strided or padded pools (it decomposes the reduction before
  caching the write), and on a channel-padding pack it leaves a
  lane-dependent condition inside the texel store, which TVM's vectorizer
  then rejects.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import relax, s_tir
from tvm.s_tir import dlight

from ...errors import TexscopeError
from ...ir.tir import blocks_in, scope_of
from ...ir.graph import relax_bindings, static_dims
from ...knowledge.targets import TEXEL_LANES, is_packed_texel_shape, is_texture_scope, preset_of
from ...tvm_workarounds.unchecked_schedule import UncheckedSchedule, detailed_schedule_errors
from .conv import CONV_BLOCK, schedule_packed_conv
from .fallback import schedule_fallback, schedule_gpu_fallback
from .guards import sblock_realize, split_over_threads
from . import thread_blocks
from .layout import LAYOUT_TRANSFORM_BLOCK, schedule_layout_transform
from ..parallel import build_jobs, map_in_order
from .reduction import schedule_general_reduction
from .scope_variants import scope_variants, with_scopes_of
from .unit_reduction import UnitReductionsAsElementWise


def _on_texture_target(rule: dlight.ScheduleRule, target: tvm.target.Target) -> bool:
    return dlight.ScheduleRule.is_target_available(rule, target) and "texture" in target.keys


def _static_params(func) -> bool:
    return all(static_dims(param.ty.shape) is not None
               for param in func.params if isinstance(param.ty, tvm.tirx.BufferType))


def _only_block_is_a_layout_transform(func: tvm.tirx.PrimFunc) -> bool:
    """Required by TVM's Adreno LayoutTransform rule: the root's only child
    block is named ``te_layout_transform``.  (Asked of the Schedule, a fused
    kernel that begins with a layout transform cost the rule 3 ms to
    decline.)"""
    root = func.body.block if isinstance(func.body, s_tir.SBlockRealize) else None
    if root is None:
        return False
    children = blocks_in(root.body, nested=False)
    return len(children) == 1 and children[0].name_hint == LAYOUT_TRANSFORM_BLOCK


def _texture_params(func: tvm.tirx.PrimFunc) -> list:
    return [param for param in func.params if is_texture_scope(scope_of(param))]


def _small_window(block, largest: int) -> bool:
    """Whether ``block`` reduces a window (the product of its reduction
    extents) of at most ``largest`` values."""
    extents = [iv.dom.extent for iv in block.iter_vars
               if int(iv.iter_type) == tvm.tirx.IterVar.CommReduce]
    return bool(extents) and all(isinstance(e, tvm.tirx.IntImm) for e in extents) \
        and math.prod(int(e) for e in extents) <= largest


def _texel_outputs(func: tvm.tirx.PrimFunc, pool_window: int) -> list:
    """What :class:`TexelWriter` stores into: the texture parameters; where
    there are none and every reduction of the kernel is a window of at most
    ``pool_window`` values (a pool; ``TexturePreset.texel_pool_window``),
    the packed ``[d0, d1, d2, d3, 4]`` buffers.  Left to TVM's generic
    rule, such a pool reduced its 2 x 2 window across 256 threads with
    eleven barriers a kernel: on an H200 hand_recrop's three fused pools
    took 106, 58 and 31 us writing buffers, 5 us writing images (the same
    kernels, tuning set, docs/benchmarks.md)."""
    textures = _texture_params(func)
    if textures:
        return textures
    reductions = [block for block in _blocks(func) if _reduces(block)]
    if not reductions or not all(_small_window(block, pool_window) for block in reductions):
        return []
    return [param for param in func.params if isinstance(param.ty, tvm.tirx.BufferType)
            and is_packed_texel_shape(static_dims(param.ty.shape) or ())]


def _is_spatial(sch: s_tir.Schedule, block) -> bool:
    return all(int(iv.iter_type) == tvm.tirx.IterVar.DataPar for iv in sch.get(block).iter_vars)


def _writes_any(sch: s_tir.Schedule, block, params) -> bool:
    return any(region.source.same_as(p) for region in sch.get(block).writes for p in params)


_has_if_then_else = tvm.get_global_func("s_tir.schedule.HasIfThenElse")


def _is_data_pad(sch: s_tir.Schedule, block) -> bool:
    """dlight's ``SBlockInfo.is_data_pad``, its last condition (a select in
    the block) asked first: most blocks have none, and the analysis behind
    the others costs about a millisecond a block."""
    return bool(_has_if_then_else(sch.get(block))) \
        and dlight.analysis.get_sblock_info(sch, block).is_data_pad(sch)


def _writes_one_like(sch: s_tir.Schedule, block, shape) -> bool:
    """Whether ``block`` writes one buffer of ``shape``, or of ``shape`` with
    fewer blocks of texels (a pool's output a channel pad reads): either way
    one texel of it per output texel, at most."""
    writes = sch.get(block).writes
    if len(writes) != 1:
        return False
    written = writes[0].source.ty.shape
    if tvm_ffi.structural_equal(written, shape):
        return True
    dims, out = static_dims(written), static_dims(shape)
    return (dims is not None and out is not None and len(dims) == len(out)
            and dims[-1] == out[-1] == TEXEL_LANES
            and all(d <= o for d, o in zip(dims, out)))


class TexelWriter(dlight.ScheduleRule):
    """One thread per output texel: the texel's four lanes (and any reduction
    behind them) computed in registers, then stored with one vector write.

    Matches a kernel writing one packed ``[d0, d1, d2, d3, 4]`` texture from
    one block, fed by injective blocks (inlined here) and at most one other
    block of the output's shape (a pool's sum before its division): fused
    pad-then-pack kernels, pools, and element-wise tails.  Computing lanes in
    registers keeps a lane-dependent condition (channel padding) out of the
    vector store, and a reduction keeps a full texel of accumulators: two
    things TVM 0.27's Adreno rules get wrong.
    """

    is_target_available = _on_texture_target

    def apply(self, func, target, _tunable):
        if not isinstance(func, tvm.tirx.PrimFunc) or not self.is_target_available(target):
            return None
        # Inlining removes blocks, never a write: a kernel no block of which
        # stores into what the rule writes is one it would decline after its
        # inlining.
        pool_window = preset_of(target).texel_pool_window
        if not _stores_into(func, _texel_outputs(func, pool_window)):
            return None
        try:
            return self._schedule(UncheckedSchedule(func), func.params, target, pool_window)
        except s_tir.ScheduleError:
            return None

    @staticmethod
    def _schedule(sch, params, target, pool_window):
        root = sch.get_sblock("root")
        for block in sch.get_child_blocks(root):
            if not _writes_any(sch, block, params) and _is_spatial(sch, block):
                sch.compute_inline(block)
        blocks = sch.get_child_blocks(root)
        writers = [b for b in blocks if _writes_any(sch, b, params)]
        if (len(blocks) > 2 or len(writers) != 1 or len(sch.get(writers[0]).writes) != 1
                or not _writes_any(sch, writers[0], _texel_outputs(sch.mod["main"], pool_window))):
            return None
        (compute,) = writers
        others = [b for b in blocks if not b.same_as(compute)]
        # A producer is computed again for every texel: only one computing
        # that texel's own values (a pool's sum) is worth it; a reduction
        # over more (layer_norm's mean) is left to the other rules.
        shape = sch.get(compute).writes[0].source.ty.shape
        if not all(_writes_one_like(sch, producer, shape) for producer in others):
            return None
        store = sch.cache_write(compute, 0, "local")
        *outer, lane = sch.get_loops(store)
        if len(outer) != 4 or sch.get(lane).extent.value != TEXEL_LANES:
            return None
        threads = thread_blocks.aligned_threads([sch.get(loop).extent for loop in outer],
                                                int(target.attrs.get("max_threads_per_block", 64)))
        fused = sch.fuse(*outer)
        sch.vectorize(lane)
        # Computed at the texel loop before it is split over the threads:
        # under a guarded thread loop, compute_at would check the overrun
        # against the buffer through Z3 (guards.py) and derive the guard
        # that split_over_threads appends here.
        sch.compute_at(compute, fused)
        for producer in others:
            sch.set_scope(producer, 0, "local")
            sch.compute_at(producer, fused)
        _, thread_x = split_over_threads(sch, fused, threads, [*others, compute, store])
        # TVM will not vectorize a reduction compute_at guards: a producer
        # with fewer texel blocks than the output (a pool a channel pad
        # reads) is guarded by its extent.  Its lanes then stay scalars, in
        # registers; the store still writes whole texels.  The threads'
        # guard, appended after compute_at, keeps the lanes whole (a pool of
        # 640 texels on 256 threads, found by the OpenCL fuzzer, used to get
        # it from compute_at and stay scalar).
        for block in (compute, *others):
            try:
                TexelWriter._vectorize_lanes(sch, block, thread_x)
            except s_tir.ScheduleError:
                pass
        return sch

    @staticmethod
    def _vectorize_lanes(sch, block, thread_x):
        """Lanes innermost and vectorized, so each step reads whole texels.

        Where a lane-dependent condition (channel padding) forbids it, TVM
        turns the loop back into scalars: these blocks write registers, not
        the texture, so that is still correct.  Left alone unless the loops
        under the thread are exactly the texel's lanes and reduction loops.
        """
        loops = sch.get_loops(block)
        thread_loop = sch.get(thread_x)
        inner = loops[[sch.get(loop).same_as(thread_loop) for loop in loops].index(True) + 1:]
        bindings = list(zip(sch.get(block).iter_vars, sblock_realize(sch, block).iter_values))
        spatial = [v for iv, v in bindings if int(iv.iter_type) == tvm.tirx.IterVar.DataPar]
        reduced = [v for iv, v in bindings if int(iv.iter_type) == tvm.tirx.IterVar.CommReduce]

        def loop_of(value):
            return next((loop for loop in inner if sch.get(loop).loop_var.same_as(value)), None)

        lane = loop_of(spatial[-1]) if spatial else None
        reductions = [loop for loop in map(loop_of, reduced) if loop is not None]
        if lane is None or len(reductions) + 1 != len(inner):
            return
        if reductions:
            sch.reorder(*reductions, lane)
        sch.vectorize(lane)


def _pads_conv_input(sch: s_tir.Schedule, block) -> bool:
    """Whether ``block`` is a data pad a conv reads: the Adreno rule
    schedules that one with the conv.  A pad in the epilogue (a residual's
    channels padded to the conv's, texscope.PadWholeTexels) is inlined like
    any element-wise block; left alone, it was two kernels more."""
    return _is_data_pad(sch, block) and any(
        CONV_BLOCK in sch.get(consumer).name_hint for consumer in sch.get_consumers(block))


class EpilogueConv2d(dlight.ScheduleRule):
    """TVM's Adreno Conv2d rule (as :mod:`texscope.backend.schedules.conv`
    writes it), after inlining every element-wise block
    that writes no output into its readers, in order.

    A PReLU written element-wise (``max(x, 0) + min(x, 0) * alpha``) reads
    the conv's result twice; TVM's rule inlines only blocks with one consumer,
    leaves the rest unscheduled and the kernel's texture store off GPU
    threads.  Inlined, the epilogue is one block, recomputing an add per
    reader (cheaper than another kernel).
    """

    is_target_available = _on_texture_target
    # Nothing it asks or does depends on where the kernel's tensors live:
    # ScheduleKernels gives a kernel's scope variants its schedule.
    ignores_scopes = True

    @staticmethod
    def may_take(func: tvm.tirx.PrimFunc) -> bool:
        """What ``apply`` asks of a kernel before scheduling it."""
        # Checked here: the Adreno rule's own check sees a Schedule, not the
        # PrimFunc.  Of symbolic size, its vthread split of the output
        # channels loses the bound on them once an epilogue is inlined, and
        # the kernel writes past its output (run on PoCL).  TVM's rule takes
        # only kernels with a block of this name: the others (most kernels)
        # skip the schedule, the inlining and block analyses.
        return _static_params(func) and any(CONV_BLOCK in block.name_hint
                                            for block in _blocks(func))

    def apply(self, func, target, _tunable):
        if not isinstance(func, tvm.tirx.PrimFunc) or not self.is_target_available(target) \
                or not self.may_take(func):
            return None
        sch = UncheckedSchedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        for block in blocks:
            if (_is_spatial(sch, block)
                    and not _writes_any(sch, block, func.params)
                    and not _pads_conv_input(sch, block)):
                try:
                    sch.compute_inline(block)
                except s_tir.ScheduleError:
                    pass
        preset = preset_of(target)
        return schedule_packed_conv(sch, depthwise_padding=preset.depthwise_padding_in_registers,
                                    channel_blocks=preset.conv_channel_blocks,
                                    texels_ahead=preset.conv_texels_ahead,
                                    exact_texels=preset.conv_exact_texels)


class PackedLayoutTransform(dlight.ScheduleRule):
    """TVM's Adreno LayoutTransform rule as :mod:`texscope.backend.schedules.layout`
    writes it (its thread split's guard appended once), for kernels of static
    shape on every texture target."""

    is_target_available = _on_texture_target
    ignores_scopes = True

    @staticmethod
    def may_take(func: tvm.tirx.PrimFunc) -> bool:
        """What ``apply`` asks of a kernel before scheduling it."""
        return _static_params(func) and _only_block_is_a_layout_transform(func)

    def apply(self, func, target, _tunable):
        if not isinstance(func, tvm.tirx.PrimFunc) or not self.is_target_available(target) \
                or not self.may_take(func):
            return None
        try:
            return schedule_layout_transform(UncheckedSchedule(func))
        except s_tir.ScheduleError:
            return None


class _NoneOnScheduleError(dlight.ScheduleRule):
    """One of TVM's rules, declining (None) where it fails with one of
    ``errors`` (a ScheduleError by default); the next rule takes the kernel.

    ``dlight.gpu.GeneralReduction`` binds a reduction shorter than its 256
    threads and stops in ``bind`` ("does not have compact dataflow"), as it
    does on a conv of symbolic size with 27 or 36 products per output; the
    next rule (``dlight.gpu.Fallback``) schedules that kernel.
    """

    def __init__(self, rule: dlight.ScheduleRule, errors: tuple = (s_tir.ScheduleError,)):
        self.rule = rule
        self.errors = errors

    def is_target_available(self, target) -> bool:
        return self.rule.is_target_available(target)

    def apply(self, func, target, tunable):
        try:
            return self.rule.apply(func, target, tunable)
        except self.errors:
            return None


def _blocks(func: tvm.tirx.PrimFunc) -> list:
    """Every block of ``func`` but its root, outermost first.  Rules ask it
    what they need before building a Schedule (half a millisecond)."""
    return [block for block in blocks_in(func.body) if block.name_hint != "root"]


def _reduces(block) -> bool:
    return any(int(iv.iter_type) == tvm.tirx.IterVar.CommReduce for iv in block.iter_vars)


def _reducing_blocks(func: tvm.tirx.PrimFunc) -> int:
    """How many blocks of ``func`` have a reduction iterator."""
    return sum(_reduces(block) for block in _blocks(func))


def _accumulates_a_sum(block) -> bool:
    """Whether ``block`` updates as ``X[i] = X[i] + Y``, the only reduction
    ``dlight.gpu.Reduction`` schedules (inlining producers into ``Y``, as it
    does first, keeps that form and keeps any other)."""
    store = block.body
    return (isinstance(store, tvm.tirx.BufferStore) and isinstance(store.value, tvm.tirx.Add)
            and tvm_ffi.structural_equal(store.value.a,
                                         tvm.tirx.BufferLoad(store.buffer, store.indices),
                                         map_free_vars=True))


def _is_leaf(block) -> bool:
    return not blocks_in(block.body)


def sums_into_itself(blocks: list) -> bool:
    """What ``dlight.gpu.Reduction`` needs before it can take a kernel: a
    reducing block of the ``X = X + Y`` form.  (A max pool's ``max`` is
    declined, after normalizing the kernel and inlining its padding: 3 to 5
    ms.)"""
    return any(_reduces(block) and _accumulates_a_sum(block) for block in blocks)


def ends_in_an_element_wise_block(blocks: list) -> bool:
    """What ``dlight.gpu.GeneralReduction`` needs before it can take a kernel
    of unnested blocks: its last block does not reduce (the rule asserts the
    last block it keeps is injective, and inlines injective blocks only, so a
    kernel ending in its reduction is declined, 3 ms later).  Nested blocks:
    left to the rule."""
    if not blocks or any(not _is_leaf(block) for block in blocks):
        return True
    return not _reduces(blocks[-1])


def _stores_into(func: tvm.tirx.PrimFunc, buffers: list) -> bool:
    """Whether some block of ``func`` writes one of ``buffers``."""
    return any(region.source.same_as(b)
               for block in _blocks(func) for region in block.writes for b in buffers)


def _first_writes_into_texture(func: tvm.tirx.PrimFunc) -> bool:
    """Whether some block's first write goes to a texture (what TVM's Adreno
    fallback asks of the blocks under the root, asked of all)."""
    return any(block.writes and is_texture_scope(block.writes[0].source.scope())
               for block in _blocks(func))


class _OnReductions(dlight.ScheduleRule):
    """One of TVM's reduction rules, offered only kernels that reduce (in at
    most ``most_blocks`` blocks, where given) and whose blocks have what the
    rule ``needs`` (a test of the kernel's blocks, outermost first, that is
    false only where the rule would decline).

    ``dlight.gpu.Reduction`` declines a kernel with no reduction iterator
    only after normalizing it and trying to inline its blocks (2-7 ms a
    kernel, as long as the schedule that follows); ``GeneralReduction``
    likewise, except for a scalar-writing kernel, which the fallback
    schedules as well.  Spatial kernels go straight to the next rule.
    ``Reduction`` takes one reduction block and at most one injective block
    after it, so it declines, as late, a kernel reducing in two blocks
    (softmax: a max, then a sum).
    """

    def __init__(self, rule: dlight.ScheduleRule, most_blocks: int | None = None,
                 needs=lambda blocks: True):
        self.rule = rule
        self.most_blocks = most_blocks
        self.needs = needs

    def is_target_available(self, target) -> bool:
        return self.rule.is_target_available(target)

    def apply(self, func, target, tunable):
        if not isinstance(func, tvm.tirx.PrimFunc):
            return None
        blocks = _blocks(func)
        reducing = sum(_reduces(block) for block in blocks)
        if reducing == 0 or (self.most_blocks is not None and reducing > self.most_blocks) \
                or not self.needs(blocks):
            return None
        return self.rule.apply(func, target, tunable)


class TextureFallback(dlight.adreno.Fallback):
    """TVM's Adreno fallback schedule, for kernels of static shape on every
    texture target, on an :data:`UncheckedSchedule`.

    TVM's rule makes its own (type-checked) Schedule; this one asks the same
    of a kernel: blocks directly under the root only, and some block whose
    first write goes to a texture.
    """

    is_target_available = _on_texture_target

    def apply(self, func, target, _tunable):
        if not isinstance(func, tvm.tirx.PrimFunc) or not self.is_target_available(target) \
                or not _static_params(func) or not _first_writes_into_texture(func):
            return None
        sch = UncheckedSchedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        if any(len(sch.get_child_blocks(block)) for block in blocks):
            return None
        if not any("texture" in sch.get(block).writes[0].source.scope() for block in blocks):
            return None
        schedule_fallback(sch)
        return sch


class BufferFallback(dlight.gpu.Fallback):
    """TVM's generic GPU fallback (``dlight.gpu.Fallback``), as
    :func:`texscope.backend.schedules.fallback.schedule_gpu_fallback` writes
    it, on an :data:`UncheckedSchedule`."""

    def apply(self, func, target, _tunable):
        if not isinstance(func, tvm.tirx.PrimFunc) or not self.is_target_available(target):
            return None
        return schedule_gpu_fallback(UncheckedSchedule(func),
                                     dlight.base.max_threads_per_block(target))


class GeneralReduction(dlight.gpu.GeneralReduction):
    """TVM's ``dlight.gpu.GeneralReduction``, as
    :func:`texscope.backend.schedules.reduction.schedule_general_reduction`
    writes it, on an :data:`UncheckedSchedule`."""

    def apply(self, func, target, _tunable):
        if not isinstance(func, tvm.tirx.PrimFunc) or not self.is_target_available(target):
            return None
        return schedule_general_reduction(UncheckedSchedule(func), target.kind.name)


def _texture_stores_off_threads(func: tvm.tirx.PrimFunc) -> bool:
    """Whether some store into a texture lies outside every thread-bound loop."""
    found = []

    def visit(value, visitor):
        # Everything under a thread-bound loop runs on threads: not walked
        # (most of a scheduled kernel's nodes lie there).
        if isinstance(value, tvm.tirx.For) and value.thread_binding is not None:
            return
        if isinstance(value, tvm.tirx.BufferStore) and is_texture_scope(scope_of(value.buffer)):
            found.append(value)
            return
        visitor.default_visit(value)

    tvm_ffi.structural_visit(func.body, visit)
    return bool(found)


def _detailed_reason(schedule, err: s_tir.ScheduleError) -> str:
    """The line of TVM's detailed report saying why ``schedule()`` failed
    (with ``err``, in short): it is scheduled again, errors rendered in full."""
    try:
        with detailed_schedule_errors():
            schedule()
    except s_tir.ScheduleError as detailed:
        err = detailed
    return next((line.strip() for line in str(err).splitlines()
                 if line.strip().startswith("Error message:")), str(err).strip())


def _caller(mod: tvm.IRModule, gvar) -> tuple[str, str] | tuple[None, None]:
    """The first (function, binding) calling ``gvar``."""
    for function, binding in relax_bindings(mod):
        value = binding.value
        if isinstance(value, relax.Call) and value.args and value.args[0].same_as(gvar):
            return function.name_hint, binding.var.name
    return None, None


@tvm.transform.module_pass(opt_level=0, name="texscope.RequireTextureKernelsOnThreads")
def RequireTextureKernelsOnThreads(mod: tvm.IRModule, _ctx) -> tvm.IRModule:  # pylint: disable=invalid-name
    """A TexscopeError for a kernel storing into a texture outside GPU threads
    (a schedule that left it unbound): compiled for the host, it would crash
    the build."""
    for gvar, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc) and _texture_params(func) \
                and _texture_stores_off_threads(func):
            function, binding = _caller(mod, gvar)
            raise TexscopeError(
                f"no schedule puts the texture stores of kernel {gvar.name_hint!r} on GPU "
                "threads; its registry entry should not offer a texture output",
                function, binding)
    return mod


def _is_scheduled(func) -> bool:
    return bool(func.attrs is not None and func.attrs.get("tirx.is_scheduled", False))


@tvm.transform.module_pass(opt_level=0, name="texscope.ScheduleKernels")
class ScheduleKernels:  # pylint: disable=too-few-public-methods
    """dlight's ``ApplyDefaultSchedule``, each kernel on a thread of its own.

    Every unscheduled PrimFunc gets the schedule of the first rule that takes
    it, under the target bound to it (``BindTarget``) or the current one.
    Kernels are independent, so the module is the one
    ``ApplyDefaultSchedule(*rules)`` makes, whatever ``jobs``.

    Kernels with more reduction blocks are handed out first: convs, pools
    and softmaxes take 10 to 20 ms each against 2 to 4 for a layout
    transform, and one of them started last would keep a thread busy while
    the others idle (longest first, as list scheduling does).

    A kernel that equals another but for where its tensors live (one conv
    whose output is an image at one call and a buffer at the next) gets that
    kernel's schedule with its own parameters
    (:mod:`texscope.backend.schedules.scope_variants`) where the rule taking it, and
    every rule before, ``ignores_scopes`` (declares ``may_take``, a cheap
    necessary test of a kernel): a conv's schedule is 10 to 15 ms.
    """

    def __init__(self, *rules: dlight.ScheduleRule, jobs: int | None = None):
        self.rules = list(rules)
        self.jobs = jobs

    def transform_module(self, mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        pending = [(gvar, func) for gvar, func in mod.functions.items()
                   if isinstance(func, tvm.tirx.PrimFunc) and not _is_scheduled(func)]
        current = tvm.target.Target.current(allow_none=True)
        jobs = build_jobs() if self.jobs is None else self.jobs
        variants = scope_variants([func for _, func in pending], self._may_share)
        firsts = [i for i in range(len(pending)) if i not in variants]
        if jobs > 1:
            firsts.sort(key=lambda i: -_reducing_blocks(pending[i][1]))
        done = dict(zip(firsts, map_in_order(
            lambda i: self._located(mod, pending[i], current), firsts, jobs)))
        # A variant of a kernel that rules blind to scopes scheduled gets that
        # schedule; the others are scheduled on their own.
        alone = []
        for index, first in variants.items():
            func, rule = done[first]
            shared = None
            if func is not None and all(getattr(r, "ignores_scopes", False)
                                        for r in self.rules[:rule + 1]):
                shared = with_scopes_of(func, pending[first][1], pending[index][1])
            if shared is None:
                alone.append(index)
            else:
                done[index] = (shared, rule)
        done.update(zip(alone, map_in_order(
            lambda i: self._located(mod, pending[i], current), alone, jobs)))
        mod = tvm.IRModule(mod.functions, attrs=mod.attrs, global_infos=mod.global_infos)
        for index, (gvar, _) in enumerate(pending):
            if done[index][0] is not None:
                mod[gvar] = done[index][0]
        return mod

    def _may_share(self, func: tvm.tirx.PrimFunc) -> bool:
        """Whether a rule blind to scopes, before any other, may take ``func``."""
        for rule in self.rules:
            if not getattr(rule, "ignores_scopes", False):
                return False
            if rule.may_take(func):
                return True
        return False

    def _located(self, mod: tvm.IRModule, kernel: tuple, current) -> tuple:
        """:meth:`_schedule`, a rule's ScheduleError a TexscopeError naming
        the kernel and its first caller (a rule that cannot schedule a
        kernel declines it; one that fails midway is a gap in the rules)."""
        gvar, func = kernel
        try:
            return self._schedule(func, current)
        except s_tir.ScheduleError as err:
            reason = _detailed_reason(lambda: self._schedule(func, current), err)
            function, binding = _caller(mod, gvar)
            raise TexscopeError(f"no schedule rule could schedule kernel {gvar.name_hint!r}: "
                                f"one failed midway ({reason})", function, binding) from None

    def _schedule(self, func: tvm.tirx.PrimFunc, current) -> tuple:
        """The scheduled kernel and the index of the rule that took it
        (None, None where none did)."""
        target = func.attrs.get("target", current) if func.attrs is not None else current
        for index, rule in enumerate(self.rules):
            space = rule.apply(func, target, False)
            if space is not None:
                (sch,) = [space] if isinstance(space, s_tir.Schedule) else space
                return sch.mod["main"].with_attr("tirx.is_scheduled", True), index
        return None, None


def schedule_rules() -> list:
    """The schedule rules, in the order they are tried (see the module docstring)."""
    return [
        EpilogueConv2d(),
        PackedLayoutTransform(),
        TexelWriter(),
        TextureFallback(),
        # Kernels of no texture: TVM's generic GPU rules.
        _OnReductions(dlight.gpu.Reduction(), most_blocks=1, needs=sums_into_itself),
        _OnReductions(_NoneOnScheduleError(GeneralReduction()),
                      needs=ends_in_an_element_wise_block),
        BufferFallback(),
    ]


def schedule_passes(jobs: int | None = None) -> list:
    """Reductions of one step made element-wise (TVM's fallback miscompiles
    them: ``unit_reduction.py``), the schedule rules on ``jobs`` threads
    (:func:`texscope.backend.parallel.build_jobs` when None), then a check
    that every texture kernel runs on GPU threads."""
    return [
        UnitReductionsAsElementWise,
        ScheduleKernels(*schedule_rules(), jobs=jobs),
        RequireTextureKernelsOnThreads,
    ]
