"""Threads per block over whole rows (texscope.backend.schedules.thread_blocks)."""

import re

import pytest
import tvm
from tvm import tirx

import texscope
from conftest import threads_per_block
from texscope.backend.schedules import thread_blocks
from texscope.backend.schedules.thread_blocks import aligned_threads
from texscope.models import zoo


@pytest.mark.parametrize("extents, threads", [
    # inception's max pool, lanes fused in: two rows of 28 x 4 lanes.
    ((1, 8, 28, 28, 4), 224),
    # a packing's texel loops (lanes vectorized): one 28 x 7 row block.
    ((1, 8, 28, 7), 196),
    # the rows divide into 256 as they stand.
    ((1, 16, 32, 32), 256),
    # a row longer than a block: a divisor of it.
    ((1, 4, 3000), 250),
    # all the work fits one block: one block of exactly that many.
    ((1, 4, 7, 7), 196),
    ((3,), 3),
    # 13 x 4 lanes: 52 threads, under a useful block; TVM's 256, guarded.
    ((1, 8, 13, 13, 4), 256),
    # a prime extent larger than a block.
    ((1, 1031), 256),
])
def test_the_block_covers_whole_rows(extents, threads):
    assert aligned_threads(extents, 256) == threads


def test_a_symbolic_extent_keeps_the_limit():
    n = tirx.Var("n", "int64")
    assert aligned_threads([tirx.IntImm("int64", 8), n], 256) == 256


def _pool_source(result) -> str:
    source = result.opencl_source
    start = re.search(r"__kernel void max_pool2d_kernel\([^;{]*\) \{", source).end()
    return source[start:source.index("\n}\n", start)]


def _index_arithmetic(source: str) -> int:
    return source.count("%") + source.count(" / ")


def test_the_inception_blocks_pool_and_packings_run_on_blocks_of_whole_rows(monkeypatch):
    result = texscope.build(zoo.NETWORKS["inception"](), "adreno-opencl", jobs=1)
    threads = {gvar.name_hint: threads_per_block(func)
               for gvar, func in result.module.functions.items()
               if isinstance(func, tvm.tirx.PrimFunc)}
    assert threads["max_pool2d"] == 224
    assert threads["te_layout_transform"] == 196
    assert all(tvm.s_tir.analysis.verify_well_formed(func)
               for func in result.module.functions.values() if isinstance(func, tvm.tirx.PrimFunc))
    # Each thread finds its window with half the divisions and remainders.
    ours = _index_arithmetic(_pool_source(result))
    monkeypatch.setattr(thread_blocks, "aligned_threads", lambda _extents, limit: limit)
    theirs = _index_arithmetic(_pool_source(texscope.build(zoo.NETWORKS["inception"](),
                                                            "adreno-opencl", jobs=1)))
    assert 0 < ours <= theirs // 2
