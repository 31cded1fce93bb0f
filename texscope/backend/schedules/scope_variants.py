"""Kernels that differ only in where their tensors live.

One conv called where its output is an image and again where it is a
buffer is two PrimFuncs after FuseTIR or ``SplitPrimFuncsBySignature``:
equal but for the memory scopes of their parameters.  A schedule rule that
never looks at scopes (``ignores_scopes``) makes the same schedule of both,
so :class:`texscope.backend.schedules.kernels.ScheduleKernels` schedules one and
gives the other its result with the other's scopes (a conv's schedule is 10
to 15 ms; the re-scoping a fraction of one).  Lowering still runs per
kernel: it reads images and buffers differently.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir

from ...ir.tir import blocks_in, scope_of
from ...ir.graph import static_dims
from ..lowering.specialize import buffer_in_scope

# Attributes that name a function or a copy, not what it computes.
NAMING_ATTRS = ("global_symbol", "texscope.storage_signature")


def _shapes(func: tvm.tirx.PrimFunc) -> tuple | None:
    """Each parameter's static shape and dtype (None where one is symbolic)."""
    key = []
    for param in func.params[:]:
        if not isinstance(param.ty, tvm.tirx.BufferType):
            return None
        dims = static_dims(param.ty.shape)
        if dims is None:
            return None
        key.append((dims, str(param.ty.dtype)))
    return tuple(key)


def plain(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """``func`` with every parameter a global buffer and no naming attributes."""
    moved = {param: buffer_in_scope(param, "global") for param in func.params
             if scope_of(param) not in ("", "global")}
    plain = func.specialize(moved) if moved else func
    for name in NAMING_ATTRS:
        if plain.attrs is not None and name in plain.attrs:
            plain = plain.without_attr(name)
    return plain


def scope_variants(funcs: list[tvm.tirx.PrimFunc], considered=lambda func: True
                   ) -> dict[int, int]:
    """Index of each function that equals an earlier one but for its
    parameters' memory scopes -> the index of the first such one.  Only
    functions of static shape are compared, only with functions whose
    parameters have the same shapes, and only where ``considered``."""
    by_shapes: dict[tuple, list[int]] = {}
    for index, func in enumerate(funcs):
        key = _shapes(func)
        if key is not None:
            by_shapes.setdefault(key, []).append(index)
    variants: dict[int, int] = {}
    for indices in by_shapes.values():
        indices = [index for index in indices if len(indices) > 1 and considered(funcs[index])]
        if len(indices) < 2:
            continue
        firsts: list[tuple[int, tvm.tirx.PrimFunc]] = []
        for index in indices:
            unscoped = plain(funcs[index])
            first = next((i for i, other in firsts if tvm_ffi.structural_equal(other, unscoped)),
                         None)
            if first is None:
                firsts.append((index, unscoped))
            else:
                variants[index] = first
    return variants


def _names_made(func: tvm.tirx.PrimFunc) -> list[str]:
    """Names of the blocks and buffers a schedule made or kept in ``func``."""
    return [name for block in blocks_in(func.body)
            for name in (block.name_hint, *(buffer.name for buffer in block.alloc_buffers))]


def with_scopes_of(scheduled: tvm.tirx.PrimFunc, original: tvm.tirx.PrimFunc,
                   variant: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc | None:
    """``scheduled`` (a schedule of ``original``, a scope variant of
    ``variant``) with ``variant``'s parameters (names and scopes) and
    attributes, then the attributes scheduling added: what scheduling
    ``variant`` makes.  None where a block or buffer the schedule made is
    named after a parameter the variant names otherwise (a register copy of
    an input, ``lv7_local``): only scheduling the variant names it right."""
    renamed = [param.name for param, mine in zip(scheduled.params, variant.params)
               if param.name != mine.name]
    if renamed and any(name == old or name.startswith(old + "_")
                       for name in _names_made(scheduled) for old in renamed):
        return None
    # Definitions of its own (two PrimFuncs must not share one), and the
    # variant's parameters (FuseTIR names them after the call's variables),
    # as a schedule of the variant keeps them.
    out = s_tir.renew_defs(scheduled)
    own = dict(zip(out.params, variant.params))
    threads: dict = {}

    def own_thread(loop):
        # renew_defs leaves a loop's thread binding, which bind() makes anew.
        binding = loop.thread_binding
        if binding is None:
            return loop
        if binding.var not in threads:
            threads[binding.var] = tvm.tirx.IterVar(
                binding.dom, tvm.tirx.Var(binding.var.name, binding.var.ty), binding.iter_type,
                binding.thread_tag)
        return tvm.tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body,
                            threads[binding.var], loop.annotations)

    out = tvm_ffi.structural_map(out, [(tvm.ir.Var, lambda var: own.get(var, var)),
                                       (tvm.tirx.For, own_thread)])
    attributes = dict(out.attrs.items()) if out.attrs is not None else {}
    before = set(original.attrs.keys()) if original.attrs is not None else set()
    added = [(name, value) for name, value in attributes.items() if name not in before]
    for name in attributes:
        out = out.without_attr(name)
    for name, value in [*(variant.attrs.items() if variant.attrs is not None else ()), *added]:
        out = out.with_attr(name, value)
    return out
