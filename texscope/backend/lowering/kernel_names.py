"""Kernel names of bounded length.

TVM's FuseOps names a fused PrimFunc after every operator in it
(``fused_tir_negative_tir_cos_subtract3_multiply1_...``), without a bound, and
the OpenCL kernel is that name plus ``_kernel``.  PoCL aborts the whole
process on a kernel name over about 250 characters ("Final linking of kernel
... failed": it names a cache file after the kernel), and NVIDIA's driver
corrupted its heap listing a program of many long names (see
``texscope.opencl.replay``).  face_landmark_with_attention fuses 33
operators computing one 4x4 matrix into one kernel of a 337-character name.

A PrimFunc named longer than :data:`LONGEST` characters keeps its first
operators' names and ends in a digest of its whole name, so that the kernel
still says what it starts with and two long names stay apart.  The bound
leaves PoCL's (a file name's 255 characters, less what it adds) far behind
and keeps the names TVM gives the other MediaPipe models' kernels as they
are (up to 119 characters) but one of pose_detection (173).
"""

from __future__ import annotations

import hashlib

import tvm
from tvm import relax, tirx

from ...ir.graph import redirect_calls

LONGEST = 120
_DIGEST = 8


def short_name(name: str, taken: set[str]) -> str:
    """``name`` if it is at most :data:`LONGEST` characters, else its start
    cut at an underscore and a digest of the whole, not in ``taken``."""
    if len(name) <= LONGEST:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()
    start = name[:LONGEST - _DIGEST - 1]
    start = start[:start.rfind("_")] if "_" in start else start
    candidate, extra = f"{start}_{digest[:_DIGEST]}", _DIGEST
    while candidate in taken:  # a digest's prefix shared: a longer prefix
        extra += 1
        candidate = f"{start[:LONGEST - extra - 1]}_{digest[:extra]}"
    return candidate


@tvm.transform.module_pass(opt_level=0, name="texscope.ShortenKernelNames")
def ShortenKernelNames(mod: tvm.IRModule, _ctx) -> tvm.IRModule:  # pylint: disable=invalid-name
    """Rename each PrimFunc whose name is longer than :data:`LONGEST`
    (:func:`short_name`), its calls included."""
    long_named = [gvar for gvar, func in mod.functions.items()
                  if isinstance(func, tirx.PrimFunc) and len(gvar.name_hint) > LONGEST]
    if not long_named:
        return mod
    taken = {gvar.name_hint for gvar in mod.functions}
    # The BlockBuilder types the new GlobalVars as it adds their functions.
    builder = relax.BlockBuilder(tvm.IRModule(
        {gvar: func for gvar, func in mod.functions.items() if gvar not in long_named},
        attrs=mod.attrs, global_infos=mod.global_infos))
    renamed = {}
    for gvar in long_named:
        name = short_name(gvar.name_hint, taken)
        taken.add(name)
        func = mod[gvar]
        if func.attrs is not None and "global_symbol" in func.attrs:
            func = func.with_attr("global_symbol", name)
        renamed[gvar] = builder.add_func(func, name)
    for gvar, func in builder.get().functions.items():
        if isinstance(func, relax.Function):
            builder.update_func(gvar, redirect_calls(func, renamed))
    return builder.get()
