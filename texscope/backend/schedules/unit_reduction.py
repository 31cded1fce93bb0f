"""Reductions over nothing but unit axes, rewritten as element-wise blocks.

A mean or sum over axes of extent 1 (``R.mean`` of a ``(1, C, 1, 1)``
tensor over its spatial axes) is legalized as a reduction block with an init
and one update.  TVM 0.27's ``dlight.gpu.Fallback`` then inlines the
element-wise epilogue that reads it (``reverse_compute_inline``) into both
the init and the update, so the update reads the epilogue's result instead
of the running sum: ``mean(lv) + lv`` came out ``3 * lv`` in TVM's own
generic OpenCL build as in texscope's (found by the OpenCL fuzzer on PoCL).

With one step to reduce, the block is element-wise: its value is the update
with the running value read replaced by the init's.  The reduction axes stay
as spatial axes of extent 1, so loops and bindings are untouched, and the
rules that follow inline the block as any other.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx


def _unit(extent) -> bool:
    return isinstance(extent, tirx.IntImm) and int(extent) == 1


def _element_wise(realize: s_tir.SBlockRealize) -> s_tir.SBlockRealize:
    block = realize.block
    reduced = [iv for iv in block.iter_vars if int(iv.iter_type) == tirx.IterVar.CommReduce]
    init, update = block.init, block.body
    if (not reduced or not all(_unit(iv.dom.extent) for iv in reduced)
            or not isinstance(init, tirx.BufferStore) or not isinstance(update, tirx.BufferStore)
            or not init.buffer.same_as(update.buffer)
            or not tvm_ffi.structural_equal(init.indices, update.indices)):
        # A tuple reduction (argmax's) has more than one store: left as it is.
        return realize

    def running_value(load):
        if load.source.same_as(update.buffer) \
                and tvm_ffi.structural_equal(load.indices, update.indices):
            return init.value
        return load

    value = tvm_ffi.structural_map(update.value, (tvm.ir.TensorLoad, running_value))
    iter_vars = [tirx.IterVar(iv.dom, iv.var, tirx.IterVar.DataPar, iv.thread_tag)
                 for iv in block.iter_vars]
    spatial = s_tir.SBlock(iter_vars, block.reads, block.writes, block.name_hint,
                           tirx.BufferStore(update.buffer, value, update.indices), None,
                           block.alloc_buffers, block.match_buffers, block.annotations)
    return s_tir.SBlockRealize(realize.iter_values, realize.predicate, spatial)


@tirx.transform.prim_func_pass(opt_level=0, name="texscope.UnitReductionsAsElementWise")
def UnitReductionsAsElementWise(func, _mod, _ctx):  # pylint: disable=invalid-name
    """Every reduction block whose reduction axes all have extent 1, as the
    element-wise block it is (see the module docstring)."""
    return tvm_ffi.structural_map(func, (s_tir.SBlockRealize, _element_wise))
