"""The cost model plans are judged by.

A plan costs the bytes its copies move plus a launch price per copy, minus
what texture reads and writes save (per byte accessed, by the reading or
writing kernel's cost class).  Those prices come from the target's cost
profile (:mod:`texscope.knowledge.profile`): measured by ``texscope calibrate``, or the
preset's defaults.  Costs are in bytes-copied equivalents, counted in units
of 16 bytes so that the planner's min-cut works on integers; a profile's
``copy_seconds_per_byte`` turns them into seconds.
"""

from __future__ import annotations

import math

import attrs
import tvm
from tvm import relax

from ..knowledge import registry
from ..ir.graph import TO_VDEVICE, dps_inputs, reads_a_weight, relax_bindings, static_bytes
from ..knowledge.registry import Storage
from ..knowledge.targets import is_texture_scope, texture_target

UNIT_BYTES = 16


def units(nbytes: float) -> int:
    return math.ceil(nbytes / UNIT_BYTES)


def _profile(graph):
    texture = graph.texture if graph.texture is not None else texture_target("adreno-opencl")
    return texture.profile


def launch_bytes(graph) -> int:
    """A copy's launch price in bytes, from the graph's target's cost profile."""
    return round(_profile(graph).copy_launch_bytes)


def write_gain(graph, tensor) -> float:
    """What writing ``tensor`` as a texture saves per byte: its producing
    kernel's price; 0 for parameters and constants (they arrive, nobody writes them)."""
    if tensor.origin != "call" or tensor.fit.scope is None or tensor.index not in graph.producers:
        return 0.0  # (never a texture, or a field of a nested tuple: written as it is)
    site, _ = graph.producer(tensor.index)
    return _profile(graph).write_gain(site.support)


def assignment_cost(consumers, storages, reads) -> int:
    """Cost, in units, of writing each tensor in ``storages[t]`` and reading
    its demands in ``reads[t]`` (one storage per demand)."""
    graph = consumers.graph
    launch = launch_bytes(graph)
    total = 0
    for tensor, storage, read in zip(graph.tensors, storages, reads):
        copies = {r for r in read if r is not storage}
        total += len(copies) * units(tensor.nbytes + launch)
        if storage is not Storage.TEXTURE:
            total += units(write_gain(graph, tensor) * tensor.nbytes)
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
        Bytes-copied equivalents that texture reads and writes save, by the
        cost profile (negative where textures cost).
    units : int
        The total in planner units: copies' bytes and launches, minus savings.
    seconds : float
        ``units`` in seconds by the profile's copy speed: the predicted run
        time against the same module with every tensor in a buffer.
    """

    copies: int
    copy_bytes: int
    texture_saving: int
    units: int
    seconds: float = 0.0


def _in_texture(ty) -> bool:
    return isinstance(ty, relax.TensorType) and ty.vdevice is not None and \
        is_texture_scope(ty.vdevice.memory_scope)


def _is_copy(call) -> bool:
    return isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) \
        and call.op.name == TO_VDEVICE


def copies_in(mod: tvm.IRModule) -> int:
    """How many copies between storages (``to_vdevice`` calls) ``mod`` makes:
    :func:`plan_cost`'s ``copies`` without pricing every kernel (which walks
    the TIR of the scheduled ones)."""
    return sum(_is_copy(binding.value) for _, binding in relax_bindings(mod))


def plan_cost(mod: tvm.IRModule, target=None, profile=None) -> PlanCost:
    """The cost of a finished (annotated) module under the same model.

    Comparable across planners: texscope's policies and upstream's pass.
    ``profile`` prices it (a CostProfile or a profile file; by default the
    target's preset's, Adreno's without a target).
    """
    prices = texture_target(target if target is not None else "adreno-opencl", profile).profile
    launch = round(prices.copy_launch_bytes)
    copies = copy_bytes = 0
    saving = 0.0
    total = 0
    for gvar, binding in relax_bindings(mod):
        call = binding.value
        if not isinstance(call, relax.Call) or isinstance(call.op, relax.GlobalVar):
            continue
        if _is_copy(call):
            nbytes = static_bytes(call.args[0].ty)
            copies += 1
            copy_bytes += nbytes
            total += units(nbytes + launch)
            continue
        support = registry.support_for(call, mod)
        for arg in dps_inputs(call):
            if _in_texture(arg.ty):
                gain = prices.read_gain(support, reads_a_weight(arg, mod, gvar))
                saving += gain * static_bytes(arg.ty)
                total -= units(gain * static_bytes(arg.ty))
        if _in_texture(binding.var.ty):
            written = prices.write_gain(support) * static_bytes(binding.var.ty)
            saving += written
            total -= units(written)
    return PlanCost(copies, copy_bytes, int(saving), total,
                    prices.seconds(total * UNIT_BYTES))


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
