"""The optimal planner: exact against exhaustive search, never worse than local."""

import pytest
from hypothesis import assume, event, given, settings


import texscope
from conftest import ADRENO, run_pass
from fuzz_models import build, recipes
from modules import rules
from texscope import collect_consumer, collect_producer
from texscope.knowledge import registry
from texscope.planner.cost import copies_in
from texscope.diagnostics.exhaustive import exhaustive, plan_units as plan_cost_units
from texscope.knowledge.registry import Storage


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
    # sync), paying a copy for the unpacking transform: it saves more.  The
    # packing transforms are injective kernels too, so synced: x is a buffer,
    # its packed copy starts as one and is copied for the conv.
    assert optimal.of("lv3").storage is Storage.TEXTURE and optimal.copies == 2
    assert optimal.of("lv").storage is Storage.BUFFER
    with pytest.raises(texscope.TexscopeError, match="cannot honour the sync rules"):
        collect_producer(consumers, "local")


def test_plan_cost_of_a_finished_module():
    ours = run_pass(texscope.texture_scope_pipeline(ADRENO), rules.Conflict)
    found = texscope.plan_cost(ours, ADRENO)
    assert (found.copies, found.copy_bytes) == (1, 2 * 16 * 16 * 4 * 4)
    assert found.texture_saving > 0
    assert copies_in(ours) == 1 and copies_in(rules.Conflict) == 0
