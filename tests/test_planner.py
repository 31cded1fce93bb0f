"""The optimal planner: exact against exhaustive search, never worse than local."""

import attrs
import pytest
from hypothesis import assume, event, example, given, settings


import texscope
from conftest import ADRENO, copies, run_pass, scopes
from fuzz_models import build, recipes
from modules import rules
from modules.constant_folding import CONV_OF_CONSTANT_WEIGHTS
from texscope import collect_consumer, collect_producer
from texscope.knowledge import registry
from texscope.diagnostics.exhaustive import (MAX_REALIZED, exhaustive, plan_units as plan_cost_units,
                                             realized_optimum, realized_price)
from texscope.planner.cost import copies_in
from texscope.knowledge.registry import Storage
from texscope.planner.cost import UNIT_BYTES, TextureReads, texture_reads, units, write_gain

TW = "global.texture-weight"
G = "global"


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


@pytest.fixture
def primary_synced():
    """Injective kernels that must write in the storage they read their
    first operand in, and nothing more (no "inputs" rule): the sync group is
    the first operand's read alone."""
    saved = list(registry._user_entries)
    registry.register_op(texscope.OpSupport(
        name="primary_synced", key=registry.PatternKey(registry.PATTERN_INJECTIVE),
        inputs=(registry.ANY, registry.ANY), outputs=(registry.ANY,), texture_gain=3.0,
        sync=frozenset({"primary"})))
    yield
    registry._user_entries[:] = saved


@pytest.mark.usefixtures("primary_synced")
@settings(max_examples=30, deadline=None)
@given(recipe=recipes(max_steps=3))
def test_optimal_equals_exhaustive_search_with_a_primary_sync_rule(recipe):
    check_exact(recipe, compare_local=False)  # the local rule refuses sync rules


@pytest.mark.usefixtures("synced_and_greedy")
def test_with_sync_rules_the_whole_graph_matters():
    mod = texscope.ConvertToPackedLayout(ADRENO)(rules.Residual)
    consumers = collect_consumer(mod, "main", texscope.texture_target(ADRENO))
    optimal = collect_producer(consumers, "optimal")
    # 16 free choices: the convs' data reads are choices too.
    assert plan_cost_units(optimal) == exhaustive(consumers, max_free=16)
    # The last relu writes a texture only to read its input as one (primary
    # sync), paying a copy for the unpacking transform: it saves more.  The
    # packing transforms are injective kernels too, so synced: x is a buffer,
    # and so is its packed form, which the first conv reads directly (copying
    # it for the conv saved less than the copy cost).
    assert optimal.of("lv3").storage is Storage.TEXTURE and optimal.copies == 1
    assert optimal.of("lv").storage is Storage.BUFFER and optimal.of("lv").copied_to == ()
    with pytest.raises(texscope.TexscopeError, match="cannot honour the sync rules"):
        collect_producer(consumers, "local")


@pytest.fixture
def conv_data_from_textures_only():
    """A registry where a packed conv reads its data from a texture only, as
    upstream's does (by default it reads either, priced by the profile): a
    tensor a conv and a reduction both read must then be copied."""
    saved = list(registry._user_entries)
    builtin = next(e for e in registry.BUILTIN if e.name == "conv2d_nchw4c")
    registry.register_op(attrs.evolve(builtin, name="conv_texture_data",
                                      inputs=(registry.TEXTURE, registry.ANY)))
    yield
    registry._user_entries[:] = saved


@pytest.fixture
def injective_reads_only_textures():
    """A registry where element-wise kernels read only textures: a tensor an
    element-wise kernel and a reduction both read must then be copied."""
    saved = list(registry._user_entries)
    registry.register_op(texscope.OpSupport(
        name="texture_injective", key=registry.PatternKey(registry.PATTERN_INJECTIVE),
        inputs=(registry.TEXTURE,), outputs=(registry.ANY,), texture_gain=0.125,
        sync=frozenset()))
    yield
    registry._user_entries[:] = saved


def check_against_the_oracle(module, max_free=MAX_REALIZED, profile=None, exact=True):
    """The pipeline's output costs, read from its IR, what the cheapest valid
    realized assignment costs; returns the oracle's answer.

    The planner prices in units of ``UNIT_BYTES``, each term (a tensor's
    write, each read, a copy) rounded up; where tensors of a texel or two
    make two plans tie in units, its pick may cost up to a unit a term more
    than the exact optimum (``exact=False`` allows that, no more).
    """
    stage1 = texscope.ConvertToPackedLayout(ADRENO)(module)
    texture = texscope.texture_target(ADRENO, profile)
    best = realized_optimum(stage1, texture, max_free=max_free)
    if best is None:
        return None
    ours = realized_price(run_pass(texscope.AnnotateTextureScope(ADRENO, profile=profile),
                                   stage1), texture)
    if exact:
        assert ours == best.price
    else:
        demands = collect_consumer(stage1, "main", texture).demands
        terms = sum(2 + len(reads) for reads in demands)
        assert best.price <= ours <= best.price + UNIT_BYTES * terms
    return best


@pytest.mark.parametrize("registry_fixture, name, tried, valid, price", [
    # Seed: the packed input, packed weights and conv output, each in either
    # storage and read in either: 2**6, all valid (a packed conv reads either
    # storage).  The conv's texture reads of the packed input and weights
    # save their bytes (read gain 1.0).
    (None, "Seed", 64, 64, -(2 * 16 * 56 * 56 * 16 + 32 * 16 * 3 * 3 * 16)),
    # Where the conv reads its data only from a texture, half are refused.
    ("conv_data_from_textures_only", "Seed", 64, 32,
     -(2 * 16 * 56 * 56 * 16 + 32 * 16 * 3 * 3 * 16)),
    # x is read by a relu (either) and a sum (buffers only): no copy pays.
    (None, "SharedPackedInput", 16, 4, 0),
    # Now the relu reads only textures: one copy, 8192 bytes and the launch
    # price (65536 bytes), less the relu's texture read (1/8 of 8192).
    ("injective_reads_only_textures", "SharedPackedInput", 16, 2, 8192 + 65536 - 1024),
    # Sync rules on the packing kernels refuse more; the prices agree.
    ("synced_and_greedy", "Seed", 64, None, None),
])
def test_optimal_equals_the_realized_oracle(request, registry_fixture, name, tried, valid, price):
    if registry_fixture:
        request.getfixturevalue(registry_fixture)
    best = check_against_the_oracle(getattr(rules, name))
    assert best.tried == tried and (valid is None or best.valid == valid)
    if price is not None:
        assert best.price == price


@settings(max_examples=15, deadline=None)
@given(recipe=recipes(max_steps=2))
# A mean of a 4x4 RGB image into a conv: the packed mean is one texel (16
# bytes), whose texture read saves 2 bytes, less than the planner's unit.
@example(recipe=(3, 4, 4, (("mean", 0, 0, False), ("conv", 1, 0, False))))
def test_optimal_equals_the_realized_oracle_on_random_modules(recipe):
    best = check_against_the_oracle(build(recipe), max_free=7, exact=False)
    event("oracle: " + ("too large, skipped" if best is None else "done"))
    assume(best is not None)


@settings(max_examples=10, deadline=None)
@given(recipe=recipes(max_steps=2))
def test_optimal_equals_the_realized_oracle_when_texture_writes_pay(recipe):
    # The default profiles price no texture write: here every kernel class
    # pays an eighth of a byte per byte read from a texture and saves half a byte per byte written to one.
    profile = texscope.texture_target(ADRENO).profile.with_gains(-0.125, 0.5, "test")
    best = check_against_the_oracle(build(recipe), max_free=7, profile=profile, exact=False)
    assume(best is not None)


@pytest.mark.usefixtures("conv_data_from_textures_only")
def test_plan_cost_of_a_finished_module():
    ours = run_pass(texscope.texture_scope_pipeline(ADRENO), rules.Conflict)
    found = texscope.plan_cost(ours, ADRENO)
    # The second conv reads c only from a texture, the reductions only from a
    # buffer: one copy of c (1 x 2 x 16 x 16 texels of 16 bytes).
    assert (found.copies, found.copy_bytes) == (1, 2 * 16 * 16 * 16)
    # Texture reads, all by convs (read gain 1.0; the default profile prices
    # no texture write): the first reads packed x (8192 bytes) and packed w
    # (2 x 8 x 3 x 3 texels: 2304), the second reads c (8192) and packed k
    # (2 x 8 texels: 256).
    assert found.texture_saving == 8192 + 2304 + 8192 + 256
    # Units of 16 bytes: the copy's bytes and Adreno's launch price (65536
    # bytes) count up, the savings down.
    assert found.units == (8192 + 65536 - found.texture_saving) // 16 == 3424
    assert copies_in(ours) == 1 and copies_in(rules.Conflict) == 0
    # The planner counts forgone savings where plan_cost counts savings: the
    # two differ by what every read (and write) could save, whatever the plan.
    consumers = collect_consumer(texscope.ConvertToPackedLayout(ADRENO)(rules.Conflict), "main",
                                 texscope.texture_target(ADRENO))
    graph = consumers.graph
    every_saving = sum(units(d.gain * t.nbytes) for t in graph.tensors
                       for d in consumers.demands[t.index])
    every_saving += sum(units(write_gain(graph, t) * t.nbytes) for t in graph.tensors)
    assert plan_cost_units(collect_producer(consumers)) == found.units + every_saving


def test_plan_cost_is_negative_when_textures_only_save():
    ours = run_pass(texscope.texture_scope_pipeline(ADRENO), rules.ConvRelu)
    found = texscope.plan_cost(ours, ADRENO)
    # The conv reads packed x (8192 bytes) and packed w (2304), the relu reads
    # c (8192) at read gain 1/8: 1024; no copy.
    assert (found.copies, found.texture_saving) == (0, 8192 + 2304 + 1024)
    assert found.units == -found.texture_saving // 16 == -720


def test_the_local_policy_takes_a_texture_on_a_tie():
    out = run_pass(texscope.texture_scope_pipeline(ADRENO, policy="local"), rules.ConvRelu)
    # The conv reads only textures: its packed inputs are written as textures
    # (a buffer would need a copy).  The relu's output is read only by the
    # unpack, which reads either: no copy either way, and the local rule's
    # last tie-break is texture over buffer (the optimal planner, weighing
    # the unpack's slight cost of a texture read, writes a buffer).
    assert scopes(out) == {"x": G, "w": G, "lv": TW, "lv1": TW, "c": TW, "lv2": TW, "gv": G}
    assert copies(out) == []
    # The unpack's texture read of lv2 costs 1/8 of its 8192 bytes.
    assert texscope.plan_cost(out, ADRENO).units == -(8192 + 2304 + 1024 - 1024) // 16
    optimal = run_pass(texscope.texture_scope_pipeline(ADRENO), rules.ConvRelu)
    assert scopes(optimal)["lv2"] == G


@pytest.mark.usefixtures("conv_data_from_textures_only")
def test_the_local_policy_shares_one_copy_among_buffer_readers():
    out = run_pass(texscope.texture_scope_pipeline(ADRENO, policy="local"), rules.Conflict)
    # c: a texture costs one copy (to a buffer, shared by both reductions), a
    # buffer one copy (to a texture, for the conv) of the same bytes: a tie,
    # texture wins.
    assert scopes(out)["c"] == TW and copies(out) == ["c_global"]


def test_plan_cost_prices_by_adreno_without_a_target():
    ours = run_pass(texscope.texture_scope_pipeline(ADRENO), rules.Conflict)
    assert texscope.plan_cost(ours) == texscope.plan_cost(ours, ADRENO)


def test_texture_reads_counts_the_convs_and_those_reading_a_texture():
    stage1 = texscope.ConvertToPackedLayout(ADRENO)(rules.Conflict)
    # Conflict's two convs; before annotation no tensor is in a texture.
    assert texture_reads(stage1) == TextureReads(2, 0)
    # Under the defaults the second conv reads c as the buffer the
    # reductions read (a copy would cost more than the texture read saves).
    assert texture_reads(run_pass(texscope.AnnotateTextureScope(ADRENO), stage1)) == \
        TextureReads(2, 1)


@pytest.mark.parametrize("maps, weights, scopes", [(1.0, -1.0, (TW, G)), (-1.0, 1.0, (G, TW)),
                                                   (0.5, 0.25, (TW, TW))])
def test_optimal_equals_the_realized_oracle_when_weight_reads_are_priced_apart(maps, weights,
                                                                               scopes):
    profile = texscope.texture_target(ADRENO).profile.with_gains(maps, 0.0, "test")
    profile = attrs.evolve(profile, kernels={
        name: attrs.evolve(prices, weight_read_gain=attrs.evolve(prices.read_gain, value=weights))
        for name, prices in profile.kernels.items()})
    best = check_against_the_oracle(CONV_OF_CONSTANT_WEIGHTS, profile=profile)
    assert best.valid > 0
    annotated = run_pass(texscope.AnnotateTextureScope(ADRENO, profile=profile),
                         texscope.ConvertToPackedLayout(ADRENO)(CONV_OF_CONSTANT_WEIGHTS))
    conv = next(b.value for b in annotated["main"].body.blocks[0].bindings
                if getattr(b.value.op, "name", "") == "relax.nn.conv2d")
    assert tuple(str(arg.ty.vdevice.memory_scope) for arg in conv.args) == scopes
