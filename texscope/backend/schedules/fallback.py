"""TVM's fallback schedules, step for step, with the guards of their thread
splits appended once and blocks of whole rows: the Adreno ``Fallback``
(``schedule_default``, for kernels writing a texture) and the generic GPU
``Fallback`` (buffers only).

The rule fuses a block's spatial loops and splits them over the target's
threads per block.  Where the threads do not divide the loop, TVM 0.27's
``split`` first asks its analyzer to prove the guard needless at full
strength, and the proof, which cannot succeed, falls through to Z3: a solver
context of its own for every such split (about 4 ms, against 0.2 for a split
that divides).  Here the split runs unguarded and its guard goes on the
block as ``split`` puts it, bindings as ``split`` leaves them under a guard
(:func:`texscope.backend.schedules.guards.split_over_threads`, as for layout
transforms).  The threads per block are a whole number of the fused loops'
rows up to the target's limit (:mod:`texscope.backend.schedules.thread_blocks`); where
there is none of a useful size, the limit, as in TVM's rule.  The scheduled
kernel is the one TVM's rule makes given that many threads: the tests
compare them on every kernel of the zoo (and of the MediaPipe models, under
``real_models``) that TVM's rule schedules.
"""

from __future__ import annotations

import tvm
from tvm import s_tir
from tvm.s_tir.dlight import analysis
from tvm.s_tir.dlight.adreno.fallback import Fallback, get_max_threads_per_block
from tvm.s_tir.dlight.base import try_inline
# The generic rule's own test of a block that launches its threads itself.
from tvm.s_tir.dlight.gpu.fallback import _has_internal_thread_env  # pylint: disable=protected-access
from tvm.target import Target

from .guards import split_over_threads
from . import thread_blocks


def schedule_default(sch: s_tir.Schedule, block) -> None:
    """``Fallback.schedule_default(sch, block)`` with its thread split unguarded."""
    info = analysis.get_sblock_info(sch, block)
    lane = info.write_bufs(sch)[0].assoc_lps[-1]
    lane_loop = sch.get(lane)
    kinds = {"S": [], "R": [], "O": []}
    for iter_info in info.iters:
        if not sch.get(iter_info.loop_rv).same_as(lane_loop):
            kinds[iter_info.kind].append(iter_info.loop_rv)
    spatial, reduce, opaque = kinds["S"], kinds["R"], kinds["O"]
    indexing = analysis.collect_block_iter_vars_used_in_access_region(
        sch.get(block), info.write_bufs(sch)[0].buf_region.region)
    opaque_outer = [loop for loop in opaque if sch.get(loop).var in indexing]
    opaque_inner = [loop for loop in opaque if sch.get(loop).var not in indexing]
    if opaque != opaque_outer + opaque_inner:
        return  # as TVM's rule: opaque loops keep their order
    opaque_outer.append(lane)
    sch.reorder(*spatial, *opaque_outer, *reduce, *opaque_inner)
    assert spatial
    target = Target.current(allow_none=True)
    threads = get_max_threads_per_block(target) if target is not None else 256
    threads = thread_blocks.aligned_threads([sch.get(loop).extent for loop in spatial], threads)
    split_over_threads(sch, sch.fuse(*spatial), threads, [block])
    if len(reduce) > 1:
        at = [*spatial, *opaque_outer][-1]
        init = sch.decompose_reduction(block, at)
        written = sch.cache_write(block, 0, "local")
        sch.compute_at(written, at)
        if lane:
            sch.vectorize(sch.get_loops(init)[-1])
            sch.vectorize(sch.get_loops(written)[-1])
    elif lane is not None:
        sch.vectorize(lane)


def schedule_fallback(sch: s_tir.Schedule) -> None:
    """``Fallback.schedule_fallback(sch)`` with :func:`schedule_default`."""
    blocks = sch.get_child_blocks(analysis.get_root_block(sch))
    first = [b for b in blocks if analysis.get_sblock_info(sch, b).is_reduction()
             or analysis.get_sblock_info(sch, b).is_data_pad(sch)]
    for block in first:
        schedule_default(sch, block)
    for block in Fallback.schedule_inline_blocks(sch, [b for b in blocks if b not in first]):
        schedule_default(sch, block)


def inline_blocks(sch: s_tir.Schedule, blocks: list) -> list:
    """TVM's ``Fallback.schedule_inline_blocks`` without its early stop:
    the blocks left to schedule.

    TVM's helper reverse-inlines a block into its one producer in a loop
    whose next test asks for the producers of the block just inlined away;
    the error that raises, or a failed inlining, ends the walk over the
    blocks, and those after it are neither inlined nor returned.  A failed
    one is left out too: an element-wise block larger than the reduction it
    reads (a squeeze and excitation's gate times its feature map, after a
    conv) stayed a sequential loop writing a texture, which no GPU kernel
    can be.  Here such a block stays to be scheduled, and the walk goes on.
    """
    remaining = []
    for block in blocks:
        info = analysis.get_sblock_info(sch, block)
        if not info.is_injective() or info.is_data_pad(sch):
            remaining.append(block)
        elif len(sch.get_consumers(block)) == 1:
            try:
                sch.compute_inline(block)
            except s_tir.ScheduleError:
                remaining.append(block)
        elif len(producers := sch.get_producers(block)) == 1 \
                and len(sch.get_consumers(producers[0])) == 1:
            try:
                sch.reverse_compute_inline(block)
            # A block larger than its producer fails TVM 0.27's check of the
            # inlining as an internal error, not a ScheduleError.
            except (s_tir.ScheduleError, tvm.error.InternalError):
                remaining.append(block)
        else:
            remaining.append(block)
    return remaining


def schedule_gpu_fallback(sch: s_tir.Schedule, threads: int) -> s_tir.Schedule | None:
    """What ``dlight.gpu.Fallback`` makes of ``sch``'s kernel, ``threads`` the
    target's threads per block, its thread splits unguarded; None where the
    rule declines."""
    infos = analysis.normalize_prim_func(sch)
    if infos is None:
        return None
    reductions = []
    for info in try_inline(sch, infos):
        block = info.block_rv
        loops = sch.get_loops(block)
        if any(sch.get(loop).thread_binding is not None for loop in loops):
            continue
        if not loops and _has_internal_thread_env(sch.get(block).body):
            continue
        kinds = {"S": [], "R": [], "O": []}
        for loop, kind in zip(loops, info.dom_kind()):
            kinds[kind].append(loop)
        spatial = kinds["S"] or [sch.add_unit_loop(block)]
        sch.reorder(*spatial, *kinds["R"], *kinds["O"])
        extents = [sch.get(loop).extent for loop in spatial]
        split_over_threads(sch, sch.fuse(*spatial), thread_blocks.aligned_threads(extents, threads),
                           [block])
        if kinds["R"]:
            reductions.append((block, kinds["R"][0]))
    for block, loop in reductions:
        sch.decompose_reduction(block, loop)
    return sch
