"""TVM's ``dlight.gpu.GeneralReduction`` (softmax, layer norm and other
kernels reducing before an element-wise tail), step for step, its splits
over the threads guarded without a failed proof.

The rule splits the tail's innermost loop and each reduction over 256
threads.  A softmax over 32 channels leaves 224 of them idle, and the split
guards its block (``T.where(r * 256 + tx < 32)``) only after asking TVM's
analyzer to prove the guard needless; in TVM 0.27 that proof falls through
to Z3, a solver context of its own each time (about 4 ms a split, three
splits a softmax: 11 of its 29 ms on inception's).  Here each split runs
unguarded and its guard goes on the block as ``split`` puts it
(:func:`texscope.backend.schedules.guards.split_guarded`).  The scheduled kernel is
the one TVM's rule makes: the tests compare them on every kernel of the zoo
(and, under ``real_models``, of the MediaPipe models) that the rule takes.
"""

from __future__ import annotations

import tvm_ffi
from tvm import s_tir, sym, tirx
from tvm.s_tir.dlight.analysis import get_root_block, normalize_prim_func
from tvm.s_tir.dlight.base import try_inline_contiguous_spatial

from .guards import split_guarded

# Threads per block and the reduction's unroll depth, per target kind, as
# TVM's rule picks them.
_THREADS_AND_UNROLL = {"cuda": (256, 256), "opencl": (256, 64)}
_OTHER_KINDS = (64, 64)


def _leading(kinds: str, kind: str) -> int:
    return len(kinds) - len(kinds.lstrip(kind))


def _trailing(kinds: str, kind: str) -> int:
    return len(kinds) - len(kinds.rstrip(kind))


def _on_unit_threads(sch: s_tir.Schedule, infos: list) -> s_tir.Schedule:
    """The rule's kernel ending in a scalar: buffers private to a block whose
    loops are all of extent 1 made local, every block under a unit loop
    bound to a block (the first) or a thread (the others)."""
    blocks = [sch.get(info.block_rv) for info in infos]
    allocated = list(sch.get(get_root_block(sch)).alloc_buffers)
    analyzer = sym.Analyzer()
    for index, (info, block) in enumerate(zip(infos[:-1], blocks[:-1])):
        if not all(analyzer.can_prove_equal(sch.get(loop).extent, 1)
                   for loop in sch.get_loops(info.block_rv)):
            continue
        elsewhere = [region.source for other, other_block in enumerate(blocks) if other != index
                     for region in (*other_block.reads, *other_block.writes)]
        for buffer_index, write in enumerate(block.writes):
            buffer = write.source
            if (buffer.scope() == "global" and any(buffer.same_as(b) for b in allocated)
                    and not any(buffer.same_as(b) for b in elsewhere)):
                sch.set_scope(info.block_rv, buffer_index, "local")
    for index, info in enumerate(infos):
        sch.bind(sch.add_unit_loop(info.block_rv), "blockIdx.x" if index == 0 else "threadIdx.x")
    return sch


def _align_last_block(sch: s_tir.Schedule, infos: list, ndim: int) -> None:
    """The last block's iterators laid out as the first block's: each matched
    by domain in order, a zero where none matches (zeros leading where not
    all match)."""
    first, last = infos[0].iters, infos[-1].iters

    def mapping(*iters):
        analyzer = sym.Analyzer()
        matched, layout = 0, []
        for block_iter in first:
            if matched < len(iters) and analyzer.can_prove_equal(block_iter.dom,
                                                                 last[matched].dom):
                layout.append(iters[matched])
                matched += 1
            else:
                layout.append(tirx.const(0, iters[0].ty))
        if matched == len(iters):
            return layout
        return [tirx.const(0, iters[0].ty)] * (ndim - len(iters)) + list(iters)

    sch.transform_block_layout(infos[-1].block_rv,
                               tirx.IndexMap.from_func(mapping, ndim=len(last)))


def _spatial_loops_first(sch: s_tir.Schedule, infos: list) -> None:
    """The last (element-wise) block's loops reordered: those indexing a
    reduced buffer, or of extent 1, before the others."""
    reduced = [write.source for info in infos[:-1] for write in sch.get(info.block_rv).writes]
    last = sch.get(infos[-1].block_rv)
    loops = sch.get_loops(infos[-1].block_rv)
    loop_of = {iv.var: sch.get(loop).loop_var for iv, loop in zip(last.iter_vars, loops)}
    indexing = set()

    def note(var):
        if var in loop_of:
            indexing.add(loop_of[var])

    for read in last.reads:
        if read.source in reduced:
            for extent in read.region:
                tvm_ffi.structural_walk(extent.min, (tirx.Var, note), order="post")
                tvm_ffi.structural_walk(extent.extent, (tirx.Var, note), order="post")
    first, rest = [], []
    for loop in loops:
        node = sch.get(loop)
        (first if node.loop_var in indexing or node.extent == 1 else rest).append(loop)
    sch.reorder(*first, *rest)


def _over_threads(sch: s_tir.Schedule, loop, block, threads: int, unroll: int,
                  block_x=None) -> None:
    """``loop`` split over ``threads`` threads, the thread loop outer and bound
    (after ``block_x``, where given, to the blocks), the rest annotated for
    unrolling."""
    rest, thread = split_guarded(sch, loop, [None, threads], [block])
    sch.reorder(thread, rest)
    if block_x is not None:
        sch.bind(block_x, "blockIdx.x")
    sch.bind(thread, "threadIdx.x")
    sch.annotate(rest, ann_key="pragma_auto_unroll_max_step", ann_val=unroll)
    sch.annotate(rest, ann_key="pragma_unroll_explicit", ann_val=1)


def schedule_general_reduction(sch: s_tir.Schedule, kind: str) -> s_tir.Schedule | None:
    """What ``dlight.gpu.GeneralReduction`` makes of ``sch``'s kernel for a
    target of ``kind``; None where the rule declines."""
    threads, unroll = _THREADS_AND_UNROLL.get(kind, _OTHER_KINDS)
    infos = try_inline_contiguous_spatial(sch, normalize_prim_func(sch))
    if not infos:
        return None
    kinds = infos[0].dom_kind()
    leading_s, trailing_r = _leading(kinds, "S"), _trailing(kinds, "R")
    last_ndim = len(infos[-1].dom_kind())
    if last_ndim < len(kinds):
        if last_ndim == 0:
            return _on_unit_threads(sch, infos)
        _align_last_block(sch, infos, len(kinds))
    if (trailing_r == 0 or any(info.dom_kind() != kinds for info in infos[1:-1])
            or not infos[-1].is_injective() or len(infos[-1].dom_kind()) > len(kinds)):
        return None
    last = infos[-1].block_rv
    if "R" not in infos[-1].dom_kind():
        _spatial_loops_first(sch, infos)
    loops = sch.get_loops(last)
    block_x = sch.fuse(*loops[:leading_s])
    _over_threads(sch, loops[-1], last, threads, unroll, block_x)
    for info in reversed(infos[:-1]):
        block = info.block_rv
        for index, _ in enumerate(sch.get(block).writes):
            sch.set_scope(block, buffer_index=index, storage_scope="shared")
        sch.compute_at(block, block_x, preserve_unit_loops=True)
        fused = sch.fuse(*sch.get_loops(block)[-trailing_r:])
        _over_threads(sch, fused, block, threads, unroll)
    return sch
