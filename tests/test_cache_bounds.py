"""Register caches moved without compute_at's failing bound proofs
(texscope.backend.schedules.cache_bounds): the block, loops, guard and buffer TVM's
own compute_at / reverse_compute_at make, where the tiles overhang the data.
(Every conv kernel of the zoo and the MediaPipe models is compared with TVM's
rule in test_conv_schedule.py.)"""

import tvm
from tvm import s_tir
from tvm.script import tirx as T

from texscope.backend.schedules import cache_bounds
from texscope.backend.schedules.guards import append_guards, sblock_realize, split_unguarded


@T.prim_func(s_tir=True)
def stencil(a: T.Buffer((30,), "float32"), b: T.Buffer((28, 2), "float32")):
    for i, k, j in T.grid(28, 3, 2):
        with T.sblock("b"):
            vi, vk, vj = T.axis.remap("SRS", [i, k, j])
            with T.init():
                b[vi, vj] = T.float32(0)
            b[vi, vj] = b[vi, vj] + a[vi + vk] * T.float32(vj)


def _tvms(sch: s_tir.Schedule):
    """Tiles of 16 over 28 outputs, guarded by split; caches moved by TVM."""
    block = sch.get_sblock("b")
    i, k, _ = sch.get_loops(block)
    outer, inner = sch.split(i, [None, 16])
    read = sch.cache_read(block, 0, "local")
    sch.compute_at(read, k, preserve_unit_loops=True)
    write = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write, inner, preserve_unit_loops=True)
    return sch


def _ours(sch: s_tir.Schedule):
    """The same, split unguarded and the caches moved by cache_bounds."""
    block = sch.get_sblock("b")
    i, k, _ = sch.get_loops(block)
    (outer, inner), guard = split_unguarded(sch, i, [None, 16])
    read = sch.cache_read(block, 0, "local")
    cache_bounds.compute_at_bounded(sch, read, k, block)
    write = sch.cache_write(block, 0, "local")
    cache_bounds.reverse_compute_at_bounded(sch, write, inner, block, [T.int32(28), T.int32(2)])
    append_guards(sch, block, [guard])
    return sch


def test_moved_caches_are_the_ones_compute_at_makes():
    theirs = _tvms(s_tir.Schedule(stencil)).mod
    ours = _ours(s_tir.Schedule(stencil)).mod
    assert s_tir.analysis.verify_well_formed(ours["main"])
    tvm.ir.assert_structural_equal(ours, theirs)
    script = ours.script()
    # Both caches guarded where the tiles overhang: the input read up to
    # index 33 of 30, the output written up to 31 of 28; the output cache
    # has the output's size, not the tiles'.
    assert "T.where(i_0 * 16 + i_1 + k < 30)" in script
    assert "T.where(i_0 * 16 + i_1 < 28)" in script
    assert 'b_local = T.sblock_alloc_buffer((28, 2), scope="local")' in script


def test_compute_at_moves_the_caches_with_every_bound_holding(monkeypatch):
    # compute_at guards a moved block only where a bound proof fails (then at
    # the cost of a Z3 solver): inside the widened cache none may fail.
    guards_at_move = []
    for name in ("compute_at", "reverse_compute_at"):
        primitive = getattr(s_tir.Schedule, name)

        def recorded(sch, block, loop, *args, primitive=primitive, **kwargs):
            primitive(sch, block, loop, *args, **kwargs)
            guards_at_move.append(str(sblock_realize(sch, block).predicate))

        monkeypatch.setattr(s_tir.Schedule, name, recorded)
    _ours(s_tir.Schedule(stencil))
    assert guards_at_move == ["T.bool(True)", "T.bool(True)"]
