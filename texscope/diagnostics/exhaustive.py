"""Exhaustive search over storage assignments: the planner's yardstick.

Tries every storage for every tensor and every read for every demand that the
registry and its sync rules allow, and prices each with the planner's own
cost model.  Exponential: only for graphs with a handful of free choices, to
check that the min-cut planner is exact.
"""

from __future__ import annotations

import itertools

from ..planner import cost
from ..collect_consumer import ConsumerInfo
from ..collect_producer import ProducerInfo, writable
from ..knowledge.registry import Storage
from ..knowledge.targets import is_texture_scope

MAX_FREE = 14  # free choices tried at most (2**14 assignments)


def exhaustive(consumers: ConsumerInfo, max_free: int = MAX_FREE) -> int | None:
    """The least cost over every storage assignment the constraints allow, or
    None when there are too many to try."""
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
    """A stage-3 plan's cost in the same units."""
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
