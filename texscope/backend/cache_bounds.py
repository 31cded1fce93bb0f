"""Register caches moved under a loop without compute_at's failing bound
proofs, and the bounds put back as compute_at would have put them.

``compute_at`` and ``reverse_compute_at`` give the moved cache block the
loops its consumer (producer) needs and guard each block variable whose
values may leave the cache buffer (``T.where(v < extent)``).  Before guarding,
they ask TVM's analyzer to prove the bound at full strength; where the conv's
tiles overhang the feature map the bound is false, the proof fails, and in
TVM 0.27 a failed proof at that strength costs a Z3 solver of its own
(:mod:`texscope.backend.guards`): 3 to 5 ms a call, against 0.5 ms where
every bound holds.  Here the cache buffer and the cache block's domain are
first made large enough for every index, so that every bound holds and no
proof fails; after the move they get their sizes back, and the block the
guards compute_at derives: ``value < extent`` for each variable whose value
can reach ``extent``, simplified by an analyzer knowing the loops, as
compute_at's does.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.sym import Analyzer

from ..ir.tir import blocks_in
from .guards import sblock_realize


def _loop_analyzer(sch: s_tir.Schedule, block) -> Analyzer:
    analyzer = Analyzer()
    for loop_rv in sch.get_loops(block):
        loop = sch.get(loop_rv)
        analyzer.bind(loop.loop_var, tvm.ir.Range.from_min_extent(loop.min, loop.extent))
    return analyzer


def _index_ends(sch: s_tir.Schedule, block, buffer) -> list[int]:
    """Per dimension of ``buffer``, one past the largest index ``block``
    may touch, or the extent where that is larger (an upper bound: the
    analyzer's constant bounds)."""
    realize = sblock_realize(sch, block)
    analyzer = _loop_analyzer(sch, block)
    bindings = dict(zip((iv.var for iv in realize.block.iter_vars), realize.iter_values))
    ends = [int(extent) for extent in buffer.shape]
    for region in (*realize.block.reads, *realize.block.writes):
        if region.source.same_as(buffer):
            for dim, axis in enumerate(region.region):
                last = tvm_ffi.structural_map(axis.min + axis.extent - 1,
                                              (tirx.Var, lambda v: bindings.get(v, v)))
                ends[dim] = max(ends[dim], analyzer.const_int_bound(last).max_value + 1)
    return ends


def _bound_predicate(sch: s_tir.Schedule, cache, shape):
    """The guard compute_at gives ``cache`` inside ``shape``: each variable's
    lower and upper bound where the loops let it leave them, in order.  The
    analyzer's constant bounds decide where; on the conv's affine indices they
    are exact, and they decide as compute_at's full-strength proof does (the
    tests compare every conv kernel with TVM's rule)."""
    realize = sblock_realize(sch, cache)
    analyzer = _loop_analyzer(sch, cache)
    terms = []
    for value, extent in zip(realize.iter_values, shape):
        reach = analyzer.const_int_bound(value)
        if reach.min_value < 0:
            terms.append(value >= tirx.const(0, str(value.ty)))
        if reach.max_value >= int(extent):
            terms.append(value < extent)
    return analyzer.simplify(tirx.all(*terms)) if terms else None


def _resized(sch: s_tir.Schedule, cache, buffer, shape, predicate=None) -> None:
    """``buffer`` (the cache's register buffer) and ``cache``'s block domain
    resized to ``shape``, ``predicate`` appended to the block's guard; block
    references stay valid (blocks are matched by name, unique in a kernel)."""
    root_rv = sch.get_sblock("root")
    root = sch.get(root_rv)
    name = sch.get(cache).name_hint
    resized = tirx.decl_buffer(shape, buffer.dtype, buffer.name, scope=buffer.scope(),
                               layout=buffer.ty.layout)

    def on_realize(realize):
        if realize.block.name_hint != name:
            return realize
        block = realize.block
        domains = [tirx.IterVar(tvm.ir.Range.from_min_extent(iv.dom.min, extent), iv.var,
                                iv.iter_type, iv.thread_tag)
                   for iv, extent in zip(block.iter_vars, shape)]
        block = s_tir.SBlock(domains, block.reads, block.writes, block.name_hint, block.body,
                             block.init, block.alloc_buffers, block.match_buffers,
                             block.annotations)
        guard = realize.predicate
        if predicate is not None:
            guard = predicate if _is_true(guard) else tirx.all(guard, predicate)
        return s_tir.SBlockRealize(realize.iter_values, guard, block)

    # The callbacks must not raise: an exception inside structural_map
    # corrupts the heap (found as an abort in malloc).
    mapped = tvm_ffi.structural_map(root, [
        (tvm.ir.expr.Var, lambda var: resized if var.same_as(buffer) else var),
        (s_tir.SBlockRealize, on_realize),
    ])
    before = {b.name_hint: b for b in [root, *blocks_in(root.body)]}
    reuse = {before[b.name_hint]: b for b in [mapped, *blocks_in(mapped.body)]
             if not b.same_as(before[b.name_hint])}
    sch.state.replace(sch.get_sref(root_rv), mapped, reuse)


def _is_true(expr) -> bool:
    return isinstance(expr, tirx.IntImm) and int(expr) == 1


def _moved(sch: s_tir.Schedule, cache, move, buffer_of, partner, shape) -> None:
    """``move()`` with ``cache``'s buffer (``buffer_of`` its block) first
    large enough for every index ``partner`` touches, then sized ``shape``
    and the moved block guarded within it."""
    buffer = buffer_of(sch.get(cache))
    ends = _index_ends(sch, partner, buffer)
    if ends != [int(extent) for extent in buffer.shape]:
        _resized(sch, cache, buffer,
                 [tirx.IntImm(str(extent.ty), end) for end, extent in zip(ends, buffer.shape)])
    move()
    buffer = buffer_of(sch.get(cache))
    predicate = _bound_predicate(sch, cache, shape)
    if predicate is not None or [int(e) for e in buffer.shape] != [int(e) for e in shape]:
        _resized(sch, cache, buffer, shape, predicate)


def _written(block):
    return block.writes[0].source


def _read(block):
    return block.reads[0].source


def compute_at_bounded(sch: s_tir.Schedule, cache, loop, consumer) -> None:
    """``sch.compute_at(cache, loop, preserve_unit_loops=True)`` for a read
    cache (a block copying into a ``local`` buffer) read by ``consumer``
    alone: the same block, loops and guard, without the failing proofs."""
    _moved(sch, cache, lambda: sch.compute_at(cache, loop, preserve_unit_loops=True),
           _written, consumer, list(_written(sch.get(cache)).shape))


def reverse_compute_at_bounded(sch: s_tir.Schedule, cache, loop, producer, shape) -> None:
    """``sch.reverse_compute_at(cache, loop, preserve_unit_loops=True)`` for
    a write cache (a block copying out of a ``local`` buffer) written by
    ``producer`` alone, with the buffer sized ``shape`` after the move: the
    block, loops, guard and buffer TVM makes where the producer is guarded
    when ``cache_write`` sizes the buffer (then by the region the guards let
    the producer write: the output's shape), without the failing proofs."""
    _moved(sch, cache, lambda: sch.reverse_compute_at(cache, loop, preserve_unit_loops=True),
           _read, producer, shape)
