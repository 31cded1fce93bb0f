"""The optimal planner: exact against exhaustive search, never worse than local."""

import itertools

import pytest
from hypothesis import assume, event, given, settings


import texscope
from conftest import ADRENO, run_pass
from fuzz_models import build, recipes
from modules import rules
from texscope import collect_consumer, collect_producer, cost, registry
from texscope.collect_producer import writable
from texscope.registry import Storage

MAX_FREE = 14


def exhaustive(consumers):
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
    if free > MAX_FREE or any(not groups[k] for k in keys):
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


def plan_cost_units(plan):
    storages = [c.storage for c in plan.choices]
    reads = []
    for tensor in plan.graph.tensors:
        row = []
        for demand in plan.consumers.demands[tensor.index]:
            if demand.call is None:
                row.append(Storage.BUFFER)
            else:
                scope = plan.reads[demand.call][demand.operand]
                row.append(Storage.TEXTURE if "texture" in scope else Storage.BUFFER)
        reads.append(row)
    return cost.assignment_cost(plan.consumers, storages, reads)


@pytest.fixture
def synced_and_greedy():
    """A registry where injective kernels sync all their tensors (as ExecuTorch's
    shaders do) and texture reads save a lot: decisions then couple tensors."""
    saved = list(registry._user_entries)
    registry.register_op(texscope.OpSupport(
        name="synced_injective", key=registry.PatternKey(registry.PATTERN_INJECTIVE),
        inputs=(registry.ANY,), outputs=(registry.ANY,), texture_gain=3.0,
    ))
    yield
    registry._user_entries[:] = saved


def check_exact(recipe, compare_local=True):
    mod = texscope.ConvertToPackedLayout(ADRENO)(build(recipe))
    consumers = collect_consumer(mod, "main", texscope.texture_target(ADRENO))
    best = exhaustive(consumers)
    event("exhaustive search: " + ("too large, skipped" if best is None else "done"))
    assume(best is not None)
    optimal = collect_producer(consumers, "optimal")
    assert plan_cost_units(optimal) == best
    if compare_local:
        assert plan_cost_units(optimal) <= plan_cost_units(collect_producer(consumers, "local"))


@settings(max_examples=60, deadline=None)
@given(recipe=recipes(max_steps=3))
def test_optimal_equals_exhaustive_search(recipe):
    check_exact(recipe)


@pytest.mark.usefixtures("synced_and_greedy")
@settings(max_examples=60, deadline=None)
@given(recipe=recipes(max_steps=3))
def test_optimal_equals_exhaustive_search_with_sync_rules_and_gains(recipe):
    check_exact(recipe, compare_local=False)  # the local rule refuses sync rules


@pytest.mark.usefixtures("synced_and_greedy")
def test_with_sync_rules_the_whole_graph_matters():
    mod = texscope.ConvertToPackedLayout(ADRENO)(rules.Residual)
    consumers = collect_consumer(mod, "main", texscope.texture_target(ADRENO))
    optimal = collect_producer(consumers, "optimal")
    assert plan_cost_units(optimal) == exhaustive(consumers)
    # The last relu writes a texture only to read its input as one (primary
    # sync), paying a copy for the unpacking transform: it saves more.
    assert optimal.of("lv3").storage is Storage.TEXTURE and optimal.copies == 1
    with pytest.raises(texscope.TexscopeError, match="cannot honour the sync rules"):
        collect_producer(consumers, "local")


def test_plan_cost_of_a_finished_module():
    ours = run_pass(texscope.texture_scope_pipeline(ADRENO), rules.Conflict)
    found = texscope.plan_cost(ours, ADRENO)
    assert (found.copies, found.copy_bytes) == (1, 2 * 16 * 16 * 4 * 4)
    assert found.texture_saving > 0
