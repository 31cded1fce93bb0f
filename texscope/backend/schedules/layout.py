"""The layout transform's schedule: TVM's Adreno ``LayoutTransform`` rule,
step for step, with the guard of its thread split appended once and blocks
of whole rows.

TVM's rule vectorizes the loops that index the innermost axis of the
transform's input and output (through registers where the two differ), fuses
every other loop and splits it over 256 threads.  A packed weight or a small
activation rarely has a multiple of 256 texels, and a split that leaves a
remainder guards the blocks under it after a failed proof that costs a Z3
solver (:mod:`texscope.backend.schedules.guards`): most of the rule's time (splits
took 11.8 ms of its 17.8 on inception's four packings).  Here that split
runs unguarded and its guard goes on every block under the split loop, as
``split`` puts it (:func:`texscope.backend.schedules.guards.split_over_threads`).
Its blocks hold a whole number of the fused loops' rows, up to 256
(:mod:`texscope.backend.schedules.thread_blocks`), so that most such splits divide.
The scheduled kernel is the one TVM's rule makes given that many threads
(the tests compare them on every layout transform of the zoo and of the
MediaPipe models).

Of TVM's rule, two branches cannot run in TVM 0.27: where the input and the
output are vectorized along one loop but by different lengths, it passes
``split`` a block, or a bare factor, and stops with a TypeError.  Such a
kernel is declined here, for the next rule.
"""

from __future__ import annotations

from tvm import s_tir
from tvm.s_tir.dlight import analysis

from .guards import split_over_threads
from . import thread_blocks

LAYOUT_TRANSFORM_BLOCK = "te_layout_transform"
# TVM's rule's threads per block: the most a block of whole rows takes here.
THREADS = 256


def schedule_layout_transform(sch: s_tir.Schedule) -> s_tir.Schedule | None:
    """What TVM's Adreno ``LayoutTransform`` rule makes of a kernel whose only
    block is a layout transform; None where the rule declines or fails."""
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    if len(blocks) != 1:
        return None
    (block,) = blocks
    info = analysis.get_sblock_info(sch, block)
    if info.name != LAYOUT_TRANSFORM_BLOCK:
        return None
    read, write = info.read_bufs(sch)[0], info.write_bufs(sch)[0]
    read_lane, write_lane = read.assoc_lps[-1], write.assoc_lps[-1]
    if read_lane is None or write_lane is None:
        return None
    read_vector, write_vector = read.get_vecsize(), write.get_vecsize()
    apart = not sch.get(read_lane).same_as(sch.get(write_lane))
    if not apart and read_vector != write_vector:
        return None  # the rule's TypeError branches (see the module docstring)
    lane_loops = [sch.get(read_lane), sch.get(write_lane)]
    outer = [loop for loop in info.get_loops()
             if not any(sch.get(loop).same_as(lane) for lane in lane_loops)]
    sch.reorder(*outer, *([read_lane, write_lane] if apart else [read_lane]))
    if apart:
        read_outer, read_inner = sch.split(read_lane, [None, read_vector], preserve_unit_iters=True)
        write_outer, write_inner = sch.split(write_lane, [None, write_vector],
                                             preserve_unit_iters=True)
        sch.reorder(read_outer, write_outer, read_inner, write_inner)
        outer += [read_outer, write_outer]
        cached = sch.cache_read(block, 0, "local")
        sch.compute_at(cached, outer[-1], preserve_unit_loops=True)
        sch.vectorize(sch.get_loops(cached)[-1])
        sch.vectorize(write_inner)
        under_threads = [cached, block]
    else:
        lanes_outer, lanes = sch.split(read_lane, [None, read_vector], preserve_unit_iters=True)
        outer.append(lanes_outer)
        sch.vectorize(lanes)
        under_threads = [block]
    threads = thread_blocks.aligned_threads([sch.get(loop).extent for loop in outer], THREADS)
    split_over_threads(sch, sch.fuse(*outer), threads, under_threads)
    return sch

