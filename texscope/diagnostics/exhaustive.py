"""Exhaustive search over storage assignments: yardsticks for the planner.

:func:`exhaustive` searches the planner's own model (its ``writable`` sets,
sync groups and :func:`texscope.planner.cost.assignment_cost`): equal to the
min-cut's answer, it shows that the min-cut encodes that model exactly, and
no more.  :func:`realized_optimum` is the independent oracle: it writes every
assignment into the module through stages 4 and 5, keeps those
:func:`texscope.diagnostics.verify.check_invariants` accepts, and prices the
realized module from its IR and the cost profile alone
(:func:`realized_price`), sharing neither the planner's constraints nor its
cost code.  Both are exponential: only for graphs with a handful of free
choices.
"""

from __future__ import annotations

import itertools

import attrs
import tvm
from tvm import relax

from ..cleanup import Cleanup
from ..collect_consumer import ConsumerInfo, collect_consumer
from ..collect_producer import ProducerInfo, plan_of, writable
from ..define_vdevice import define_vdevice
from ..ir.graph import (TO_VDEVICE, dps_inputs, reads_a_weight, relax_bindings, static_bytes,
                        tensor_types)
from ..knowledge import registry
from ..knowledge.registry import Storage
from ..knowledge.targets import TextureTarget, is_texture_scope
from ..planner import cost
from .verify import check_invariants

MAX_FREE = 14  # free choices tried at most (2**14 assignments)
MAX_REALIZED = 8  # the oracle builds and checks a module per assignment: fewer


def exhaustive(consumers: ConsumerInfo, max_free: int = MAX_FREE) -> int | None:
    """The least cost over every storage assignment the planner's constraints
    allow, in the planner's own cost model, or None when there are too many."""
    graph = consumers.graph
    tensor_options = [sorted(writable(graph, t)[0], key=lambda s: s.value) for t in graph.tensors]
    groups, members = {}, []
    for tensor in graph.tensors:
        for position, demand in enumerate(consumers.demands[tensor.index]):
            sync = graph.calls[demand.call].support.sync_rules() if demand.call is not None else ()
            key = (demand.call, "inputs") if "inputs" in sync else (demand.call, demand.operand)
            groups.setdefault(key, set(demand.accepts))
            groups[key] &= demand.accepts
            members.append((tensor.index, position, key))
    keys = list(groups)
    free = sum(len(o) > 1 for o in tensor_options) + sum(len(groups[k]) > 1 for k in keys)
    if free > max_free or any(not groups[k] for k in keys):
        return None
    best = None
    for storages in itertools.product(*tensor_options):
        for labels in itertools.product(*(sorted(groups[k], key=lambda s: s.value) for k in keys)):
            label = dict(zip(keys, labels))
            if not _synced(graph, storages, label):
                continue
            reads = [[None] * len(consumers.demands[t.index]) for t in graph.tensors]
            for tensor, position, key in members:
                reads[tensor][position] = label[key]
            total = cost.assignment_cost(consumers, storages, reads)
            best = total if best is None or total < best else best
    return best


def _synced(graph, storages, label):
    for site in graph.calls:
        sync = site.support.sync_rules()
        if "outputs" in sync and len({storages[t] for t in site.outputs}) > 1:
            return False
        if "primary" in sync and site.outputs and site.operands and site.operands[0] is not None:
            key = (site.index, "inputs") if "inputs" in sync else (site.index, 0)
            if label[key] is not storages[site.outputs[0]]:
                return False
    return True


def plan_units(plan: ProducerInfo) -> int:
    """A stage-3 plan's cost in the planner's units."""
    storages = [c.storage for c in plan.choices]
    reads = []
    for tensor in plan.graph.tensors:
        row = []
        for demand in plan.consumers.demands[tensor.index]:
            if demand.call is None:
                row.append(Storage.BUFFER)
            else:
                scope = plan.reads[demand.call][demand.operand]
                row.append(Storage.TEXTURE if is_texture_scope(scope) else Storage.BUFFER)
        reads.append(row)
    return cost.assignment_cost(plan.consumers, storages, reads)


def _textures(ty):
    """The tensors of a (tuple) type that live in a texture."""
    return [t for t in tensor_types(ty)
            if t.vdevice is not None and is_texture_scope(t.vdevice.memory_scope)]


def realized_price(mod: tvm.IRModule, texture: TextureTarget) -> float:
    """What an annotated module costs, read from its IR, in bytes-copied
    equivalents: per ``to_vdevice`` the bytes it moves plus the profile's
    launch price; less, per tensor a kernel reads from a texture, its bytes
    times the kernel's read gain, and per tensor a kernel writes to one, its
    bytes times the write gain (the profile's prices of the kernel's class).

    Unlike :func:`texscope.planner.cost.plan_cost` it does not round to the
    planner's units, nor share its code.
    """
    prices = texture.profile
    total = 0.0
    for gvar, binding in relax_bindings(mod):
        call = binding.value
        if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op)):
            continue
        if call.op.name == TO_VDEVICE:
            total += static_bytes(call.args[0].ty) + prices.copy_launch_bytes
            continue
        support = registry.support_for(call, mod)
        for arg in dps_inputs(call):
            gain = prices.read_gain(support, reads_a_weight(arg, mod, gvar))
            total -= sum(gain * static_bytes(t) for t in _textures(arg.ty))
        total -= sum(prices.write_gain(support) * static_bytes(t) for t in _textures(binding.var.ty))
    return total


@attrs.frozen
class RealizedOptimum:
    """The oracle's answer.

    Attributes
    ----------
    price : float
        The least :func:`realized_price` over the valid assignments.
    tried : int
        Assignments realized.
    valid : int
        Those :func:`check_invariants` accepted.
    """

    price: float
    tried: int
    valid: int


def every_plan(consumers, max_free: int = MAX_REALIZED):
    """Every assignment of storages to the tensors of ``consumers``' function,
    as plans (an iterator); None when there are more than ``2**max_free``.

    Every tensor that fits a texture flavour on the target is tried in a
    buffer and in a texture, and every kernel operand reading it in either
    (a tensor that fits none is a buffer: a texture of it breaks an
    invariant anyway).  What the registry allows is left to the caller
    (:func:`check_invariants` on the realized plan).
    """
    graph = consumers.graph
    free = [t.index for t in graph.tensors if t.fit.scope is not None]
    slots = [(t, position) for t in free
             for position, demand in enumerate(consumers.demands[t]) if demand.call is not None]
    if len(free) + len(slots) > max_free:
        return None
    both = (Storage.BUFFER, Storage.TEXTURE)

    def plans():
        for written in itertools.product(both, repeat=len(free)):
            storages = [Storage.BUFFER] * len(graph.tensors)
            for tensor, storage in zip(free, written):
                storages[tensor] = storage
            for read in itertools.product(both, repeat=len(slots)):
                # The return is no kernel: it reads what is written.
                reads = [[storages[t.index]] * len(consumers.demands[t.index])
                         for t in graph.tensors]
                for (tensor, position), storage in zip(slots, read):
                    reads[tensor][position] = storage
                yield plan_of(consumers, storages, reads, "exhaustive")

    return plans()


def realized_optimum(mod: tvm.IRModule, texture: TextureTarget, function: str = "main",
                     max_free: int = MAX_REALIZED) -> RealizedOptimum | None:
    """The cheapest valid annotation of ``function`` in ``mod`` (stage 1's
    output), by trying them all; None when there are more than ``2**max_free``.

    Each assignment :func:`every_plan` makes is written in by
    :func:`texscope.define_vdevice.define_vdevice` and
    :func:`texscope.cleanup.Cleanup`, as the pipeline does; what the
    registry allows is left to :func:`check_invariants`.
    """
    consumers = collect_consumer(mod, function, texture)
    plans = every_plan(consumers, max_free)
    if plans is None:
        return None
    best, tried, valid = None, 0, 0
    for plan in plans:
        annotated = Cleanup()(define_vdevice(mod, {function: plan}, texture))
        tried += 1
        if check_invariants(annotated, texture.target):
            continue
        valid += 1
        price = realized_price(annotated, texture)
        best = price if best is None or price < best else best
    return RealizedOptimum(best, tried, valid)
