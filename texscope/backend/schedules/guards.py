"""Splits without their guards, and the guards put back in one replacement.

A ``split`` whose factors do not divide its loop guards the blocks under it
(``T.where(outer * f + inner < extent)``), but first asks TVM's analyzer to
prove the guard needless at full strength.  That proof cannot succeed, and in
TVM 0.27 it falls through to Z3, which builds a solver context of its own
for it: about 4 ms a guarded split, against 0.2 ms for one that divides
(iris_landmark's 25 conv row splits, medians).  The schedules here split
unguarded (``disable_predication``) and append the guard that ``split``
would have appended.
"""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import s_tir, tirx

sblock_realize = tvm.get_global_func("s_tir.schedule.GetSBlockRealize")


def split_unguarded(sch: s_tir.Schedule, loop, factors: list):
    """``sch.split(loop, factors)`` without its guard; returns the new loops
    and the guard ``split`` would have appended (None where the factors
    divide the extent, where ``split`` appends none)."""
    extent = sch.get(loop).extent
    loops = sch.split(loop, factors, preserve_unit_iters=True, disable_predication=True)
    extents = [sch.get(new).extent for new in loops]
    if math.prod(int(e) for e in extents) == int(extent):
        return loops, None
    # As split writes it, ((0 * f0 + v0) * f1 + v1) * f2 + v2, its leading
    # zero folded away by TVM's operators.
    value = sch.get(loops[0]).loop_var
    for new, factor in zip(loops[1:], extents[1:]):
        value = value * factor + sch.get(new).loop_var
    return loops, value < extent


def substituted(expr, var, value):
    """``expr`` with ``var`` replaced, nothing refolded (as ``fuse`` does)."""
    return tvm_ffi.structural_map(expr, (tirx.Var, lambda v: value if v.same_as(var) else v))


def append_guards(sch: s_tir.Schedule, block, guards: list, bindings: list | None = None) -> None:
    """Append ``guards`` to ``block``'s predicate, in order, as each split
    would have, and bind the block to ``bindings`` where given; the block
    must be its innermost loop's body."""
    realize = sblock_realize(sch, block)
    loop_rv = sch.get_loops(block)[-1]
    loop = sch.get(loop_rv)
    if not loop.body.same_as(realize):
        raise s_tir.ScheduleError("the block is not its innermost loop's body")
    guarded = s_tir.SBlockRealize(realize.iter_values if bindings is None else bindings,
                                  tirx.all(realize.predicate, *guards), realize.block)
    sch.state.replace(sch.get_sref(loop_rv), tirx.For(
        loop.loop_var, loop.min, loop.extent, loop.kind, guarded, loop.thread_binding,
        loop.annotations))


def split_guarded(sch: s_tir.Schedule, loop, factors: list, blocks: list) -> list:
    """``sch.split(loop, factors)`` as a guarded split leaves it, without its
    failed proof: the guard on each of ``blocks`` (the blocks under
    ``loop``, each its innermost loop's body once split), with the bindings
    ``split`` substitutes (its simplification finds no simpler form under
    the guard).  Returns the new loops."""
    if not isinstance(sch.get(loop).extent, tirx.IntImm):
        # Whether the factors divide a symbolic extent is not known here:
        # TVM's own split decides, as in the rules this stands for.
        return sch.split(loop, factors)
    var = sch.get(loop).loop_var
    bindings = [sblock_realize(sch, block).iter_values for block in blocks]
    loops, guard = split_unguarded(sch, loop, factors)
    if guard is not None:
        for block, values in zip(blocks, bindings):
            append_guards(sch, block, [guard], [substituted(value, var, guard.a) for value in values])
    return loops


def split_over_threads(sch: s_tir.Schedule, loop, threads: int, blocks: list) -> tuple:
    """``loop`` split over ``threads`` threads (:func:`split_guarded`) and
    bound to ``blockIdx.x`` and ``threadIdx.x``.  Returns the block and
    thread loops."""
    block_x, thread_x = split_guarded(sch, loop, [None, threads], blocks)
    sch.bind(block_x, "blockIdx.x")
    sch.bind(thread_x, "threadIdx.x")
    return block_x, thread_x
