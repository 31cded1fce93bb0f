"""Register caches moved under a loop without compute_at's failing bound
proofs, and the bounds put back as compute_at would have put them.

``compute_at`` and ``reverse_compute_at`` give the moved cache block the
loops its consumer (producer) needs and guard each block variable whose
values may leave the cache buffer (``T.where(v < extent)``).  Before guarding,
they ask TVM's analyzer to prove the bound at full strength; where the conv's
tiles overhang the feature map the bound is false, the proof fails, and in
TVM 0.27 a failed proof at that strength costs a Z3 solver of its own
(:mod:`texscope.backend.schedules.guards`): 3 to 5 ms a call, against 0.5 ms where
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

from .guards import sblock_realize


def _bind_loops(sch: s_tir.Schedule, loops, analyzer: Analyzer) -> Analyzer:
    for loop_rv in loops:
        loop = sch.get(loop_rv)
        analyzer.bind(loop.loop_var, tvm.ir.Range.from_min_extent(loop.min, loop.extent))
    return analyzer


def _index_ends(sch: s_tir.Schedule, block, buffer, analyzer: Analyzer) -> list[int]:
    """Per dimension of ``buffer``, one past the largest index ``block``
    may touch, or the extent where that is larger (an upper bound: the
    constant bounds of ``analyzer``, which knows ``block``'s loops, each
    block variable bound by its binding)."""
    realize = sblock_realize(sch, block)
    sblock = realize.block
    for iter_var, value in zip(sblock.iter_vars[:], realize.iter_values[:]):
        analyzer.bind(iter_var.var, value)
    ends = [int(extent) for extent in buffer.shape[:]]
    for region in (*sblock.reads[:], *sblock.writes[:]):
        if region.source.same_as(buffer):
            for dim, axis in enumerate(region.region[:]):
                last = analyzer.const_int_bound(axis.min + axis.extent - 1).max_value
                ends[dim] = max(ends[dim], last + 1)
    return ends


def _bound_predicate(sch: s_tir.Schedule, cache, shape, analyzer: Analyzer):
    """The guard compute_at gives ``cache`` inside ``shape``: each variable's
    lower and upper bound where the loops let it leave them, in order.  The
    analyzer's constant bounds decide where; on the conv's affine indices they
    are exact, and they decide as compute_at's full-strength proof does (the
    tests compare every conv kernel with TVM's rule).  ``analyzer`` knows
    ``cache``'s loops."""
    realize = sblock_realize(sch, cache)
    terms = []
    for value, extent in zip(realize.iter_values[:], shape):
        reach = analyzer.const_int_bound(value)
        if reach.min_value < 0:
            terms.append(value >= tirx.const(0, str(value.ty)))
        if reach.max_value >= int(extent):
            terms.append(value < extent)
    return analyzer.simplify(tirx.all(*terms)) if terms else None


def _resized(sch: s_tir.Schedule, cache, partner, buffer, shape, predicate=None) -> None:
    """``buffer`` (the register buffer only ``cache`` and ``partner`` touch)
    and ``cache``'s block domain resized to ``shape``, ``predicate``
    appended to the cache's guard; block references stay valid.

    Only the two blocks are mapped variable by variable: a callback into
    Python per node waits for the interpreter lock, which the thread
    scheduling another kernel holds (mapping the whole kernel so made
    scheduling on two threads no faster than on one)."""
    root_rv = sch.get_sblock("root")
    root, cache_block, partner_block = sch.get(root_rv), sch.get(cache), sch.get(partner)
    resized = tirx.decl_buffer(shape, buffer.dtype, buffer.name, scope=buffer.scope(),
                               layout=buffer.ty.layout)

    def swapped(stmt):
        return tvm_ffi.structural_map(
            stmt, (tvm.ir.expr.Var, lambda var: resized if var.same_as(buffer) else var))

    new_cache = swapped(cache_block)
    new_cache = s_tir.SBlock(
        [tirx.IterVar(tvm.ir.Range.from_min_extent(iv.dom.min, extent), iv.var, iv.iter_type,
                      iv.thread_tag) for iv, extent in zip(new_cache.iter_vars[:], shape)],
        new_cache.reads, new_cache.writes, new_cache.name_hint, new_cache.body, new_cache.init,
        new_cache.alloc_buffers, new_cache.match_buffers, new_cache.annotations)
    new_partner = swapped(partner_block)
    names = {cache_block.name_hint: new_cache, partner_block.name_hint: new_partner}

    def on_realize(realize):
        block = names.get(realize.block.name_hint)
        if block is None:
            return realize
        guard = realize.predicate
        if block.same_as(new_cache) and predicate is not None:
            guard = tirx.all(guard, predicate)  # folds a guard of True away
        return s_tir.SBlockRealize(realize.iter_values, guard, block)

    # The callback must not raise: an exception inside structural_map
    # corrupts the heap (found as an abort in malloc).
    body = tvm_ffi.structural_map(root.body, (s_tir.SBlockRealize, on_realize))
    new_root = s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, body,
                            root.init, [resized if b.same_as(buffer) else b
                                        for b in root.alloc_buffers[:]],
                            root.match_buffers, root.annotations)
    sch.state.replace(sch.get_sref(root_rv), new_root,
                      {root: new_root, cache_block: new_cache, partner_block: new_partner})


def _moved(sch: s_tir.Schedule, cache, loop, move, buffer_of, partner, shape) -> None:
    """``move()`` of ``cache`` under ``loop`` with ``cache``'s buffer
    (``buffer_of`` its block) first large enough for every index
    ``partner`` touches, then sized ``shape`` and the moved block guarded
    within it."""
    # One analyzer: the loops the move makes are bound to it after the move;
    # the others are ``partner``'s.
    analyzer = _bind_loops(sch, sch.get_loops(partner)[:], Analyzer())
    buffer = buffer_of(sch.get(cache))
    ends = _index_ends(sch, partner, buffer, analyzer)
    if ends != [int(extent) for extent in buffer.shape[:]]:
        _resized(sch, cache, partner, buffer,
                 [tirx.IntImm(str(extent.ty), end) for end, extent in zip(ends, buffer.shape[:])])
    move()
    target = sch.get(loop)
    made = sch.get_loops(cache)[:]
    below = next(i + 1 for i, loop_rv in enumerate(made) if sch.get(loop_rv).same_as(target))
    _bind_loops(sch, made[below:], analyzer)
    buffer = buffer_of(sch.get(cache))
    predicate = _bound_predicate(sch, cache, shape, analyzer)
    if predicate is not None or [int(e) for e in buffer.shape[:]] != [int(e) for e in shape]:
        _resized(sch, cache, partner, buffer, shape, predicate)


def _written(block):
    return block.writes[0].source


def _read(block):
    return block.reads[0].source


def compute_at_bounded(sch: s_tir.Schedule, cache, loop, consumer) -> None:
    """``sch.compute_at(cache, loop, preserve_unit_loops=True)`` for a read
    cache (a block copying into a ``local`` buffer) read by ``consumer``
    alone: the same block, loops and guard, without the failing proofs."""
    _moved(sch, cache, loop, lambda: sch.compute_at(cache, loop, preserve_unit_loops=True),
           _written, consumer, _written(sch.get(cache)).shape[:])


def reverse_compute_at_bounded(sch: s_tir.Schedule, cache, loop, producer, shape) -> None:
    """``sch.reverse_compute_at(cache, loop, preserve_unit_loops=True)`` for
    a write cache (a block copying out of a ``local`` buffer) written by
    ``producer`` alone, with the buffer sized ``shape`` after the move: the
    block, loops, guard and buffer TVM makes where the producer is guarded
    when ``cache_write`` sizes the buffer (then by the region the guards let
    the producer write: the output's shape), without the failing proofs."""
    _moved(sch, cache, loop, lambda: sch.reverse_compute_at(cache, loop, preserve_unit_loops=True),
           _read, producer, shape)
