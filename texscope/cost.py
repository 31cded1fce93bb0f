"""The cost model plans are judged by.

A plan costs the bytes its copies move plus a launch price per copy (from the
target's preset), minus what texture reads save (the registry's
``texture_gain`` of the reading kernel times the tensor's bytes).  Costs are
counted in units of 16 bytes, so that the planner's min-cut works on integers.
"""

from __future__ import annotations

import math

import attrs
import tvm
from tvm import relax

from . import registry
from .graph import dps_inputs, relax_bindings
from .registry import Storage
from .targets import ADRENO, is_texture_scope, texture_target

UNIT_BYTES = 16


def units(nbytes: float) -> int:
    return math.ceil(nbytes / UNIT_BYTES)


def launch_bytes(graph) -> int:
    preset = graph.texture.preset if graph.texture is not None else ADRENO
    return preset.copy_launch_bytes


def assignment_cost(consumers, storages, reads) -> int:
    """Cost, in units, of writing each tensor in ``storages[t]`` and reading
    its demands in ``reads[t]`` (one storage per demand)."""
    graph = consumers.graph
    launch = launch_bytes(graph)
    total = 0
    for tensor, storage, read in zip(graph.tensors, storages, reads):
        copies = {r for r in read if r is not storage}
        total += len(copies) * units(tensor.nbytes + launch)
        for demand, r in zip(consumers.demands[tensor.index], read):
            if r is not Storage.TEXTURE:
                total += units(demand.gain * tensor.nbytes)
    return total


@attrs.frozen
class PlanCost:
    """The cost of an annotated module.

    Attributes
    ----------
    copies : int
        ``to_vdevice`` copies.
    copy_bytes : int
        Bytes they move.
    texture_saving : int
        Bytes texture reads save, by the registry's gains.
    units : int
        The total in planner units: copies' bytes and launches, minus savings.
    """

    copies: int
    copy_bytes: int
    texture_saving: int
    units: int


def _nbytes(ty) -> int:
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return 0
    if not all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values):
        return 0
    return math.prod(int(d) for d in ty.shape.values) * tvm.DataType(str(ty.dtype)).bits // 8


def plan_cost(mod: tvm.IRModule, target=None) -> PlanCost:
    """The cost of a finished (annotated) module under the same model.

    Comparable across planners: texscope's policies and upstream's pass.
    """
    preset = texture_target(target).preset if target is not None else ADRENO
    copies = copy_bytes = saving = 0
    total = 0
    for _, binding in relax_bindings(mod):
        call = binding.value
        if not isinstance(call, relax.Call) or isinstance(call.op, relax.GlobalVar):
            continue
        if call.op.name == "relax.to_vdevice":
            nbytes = _nbytes(call.args[0].ty)
            copies += 1
            copy_bytes += nbytes
            total += units(nbytes + preset.copy_launch_bytes)
            continue
        gain = registry.support_for(call, mod).texture_gain
        for arg in dps_inputs(call):
            ty = arg.ty
            if isinstance(ty, relax.TensorType) and ty.vdevice is not None and \
                    is_texture_scope(ty.vdevice.memory_scope):
                saving += int(gain * _nbytes(ty))
                total -= units(gain * _nbytes(ty))
    return PlanCost(copies, copy_bytes, saving, total)


@attrs.frozen
class TextureReads:
    """How many calls of some operators an annotated module makes, and how
    many of them read their first operand (the data) from a texture."""

    calls: int
    from_texture: int


def texture_reads(mod: tvm.IRModule, ops=("relax.nn.conv2d", "relax.nn.conv2d_transpose")
                  ) -> TextureReads:
    """Count the calls of ``ops`` in ``mod``'s Relax functions whose data
    argument is in a texture scope (a texture is packed: 5-D, 4 lanes).

    Run on an annotated module, before legalization turns the calls into
    ``call_tir``: :func:`texscope.build` reports it as ``convs`` and
    ``convs_reading_texture``.
    """
    calls = reading = 0
    for _, binding in relax_bindings(mod):
        call = binding.value
        if isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) and call.op.name in ops:
            calls += 1
            vdevice = getattr(call.args[0].ty, "vdevice", None)
            reading += vdevice is not None and is_texture_scope(str(vdevice.memory_scope))
    return TextureReads(calls, reading)
