"""The op registry: which entry describes which call, and user entries."""

import attrs
import pytest
import tvm
from tvm import relax
from tvm.script import tirx as T

import texscope
from conftest import ADRENO, run_pass, scopes
from modules import rules, texel_cases
from texscope import collect_consumer, collect_producer
from texscope.backend import upstream
from texscope.knowledge import registry
from texscope.rewrites import legalize


def entry_names(mod):
    return {
        b.var.name: registry.support_for(b.value, mod).name
        for b in mod["main"].body.blocks[0].bindings
        if isinstance(b.value, relax.Call)
    }


def test_stage1_output_calls_map_to_their_entries():
    mod = run_pass(texscope.ConvertToPackedLayout(ADRENO), rules.Conflict)
    assert entry_names(mod) == {
        "lv": "layout_transform", "lv1": "layout_transform", "c": "conv2d_nchw4c",
        "lv2": "layout_transform", "p": "pointwise_conv2d_nchw4c", "m": "mean", "s": "sum",
        "lv3": "layout_transform", "lv4": "layout_transform", "lv5": "layout_transform",
    }
    pooled = run_pass(texscope.ConvertToPackedLayout(ADRENO), rules.MaxPool)
    assert entry_names(pooled)["lv2"] == "pool"


def test_a_1x1_conv_is_priced_apart_and_as_a_packed_conv_where_the_profile_has_no_price():
    from texscope.knowledge import profile as cost_profile

    mod = run_pass(texscope.ConvertToPackedLayout(ADRENO), rules.Conflict)
    calls = {b.var.name: b.value for b in mod["main"].body.blocks[0].bindings}
    pointwise, windowed = (registry.support_for(calls[n], mod) for n in ("p", "c"))
    assert registry.weight_window(calls["p"]) == (1, 1)
    assert registry.weight_window(calls["c"]) == (3, 3)
    assert (pointwise.cost_class, windowed.cost_class) == ("pointwise_conv", "packed_conv")
    assert pointwise.key.describe() == ("relax.nn.conv2d(data_layout=NCHW4c, "
                                        "kernel_layout=OIHW4o, window=1x1)")
    built_in = cost_profile.default("adreno")
    kernels = {name: prices for name, prices in built_in.document["kernels"].items()
               if name != "pointwise_conv"}
    kernels["packed_conv"] = {"read_gain": {"value": 2.0, "source": "a test"},
                              "write_gain": {"value": 0.5, "source": "a test"}}
    older = cost_profile.from_document(dict(built_in.document, kernels=kernels), "older")
    assert (older.read_gain(pointwise), older.write_gain(pointwise)) == (2.0, 0.5)
    kernels["pointwise_conv"] = {"read_gain": {"value": -3.0, "source": "a test"},
                                 "write_gain": {"value": -2.0, "source": "a test"}}
    split = cost_profile.from_document(dict(built_in.document, kernels=kernels), "split")
    assert (split.read_gain(pointwise), split.write_gain(pointwise)) == (-3.0, -2.0)
    assert (split.read_gain(windowed), split.write_gain(windowed)) == (2.0, 0.5)


def test_an_element_wise_kernel_maps_to_its_operators_entry():
    mod = run_pass(texscope.ConvertToPackedLayout(ADRENO), rules.ConvRelu)
    assert entry_names(mod)["lv2"] == "relu"
    relu = next(f for g, f in mod.functions.items() if g.name_hint == "relu")
    assert dict(relu.attrs["texscope_op"]) == {"op": "relax.nn.relu"}


def test_stage1_is_configured_by_the_registry():
    assert registry.kept_ops() == ["relax.nn.conv2d"]
    recorded = registry.recorded_attrs()
    # Pools are recognised by the tag TOPI puts on their blocks: no record.
    assert "relax.nn.max_pool2d" not in recorded
    assert recorded["relax.layout_transform"] == []


def test_the_pool_entry_is_what_lets_a_pool_read_a_texture(monkeypatch):
    # The pool reads the conv's output c as a texture.
    assert scopes(texscope.texture_scope_pipeline(ADRENO)(rules.MaxPool))["c"] == (
        "global.texture-weight")
    without = tuple(e for e in registry.BUILTIN if e.name != "pool")
    assert len(without) == len(registry.BUILTIN) - 1
    monkeypatch.setattr(registry, "BUILTIN", without)
    # Nothing else describes a pool (no entry overlaps it): it is opaque and
    # reads buffers, so the conv writes one.
    mod = run_pass(texscope.ConvertToPackedLayout(ADRENO), rules.MaxPool)
    assert entry_names(mod)["lv2"] == "opaque"
    assert scopes(texscope.texture_scope_pipeline(ADRENO)(rules.MaxPool))["c"] == "global"


@pytest.fixture
def user_entries():
    saved = list(registry._user_entries)
    yield
    registry._user_entries[:] = saved


@pytest.mark.usefixtures("user_entries")
def test_a_user_entry_makes_a_reduction_read_texture():
    # Out of the box a reduction reads buffers, so the conv writes one.
    assert scopes(texscope.texture_scope_pipeline(ADRENO)(rules.Reductions))["c"] == "global"
    texscope.register_op(texscope.OpSupport(
        name="packed_sum",
        key=texscope.OpKey("relax.sum"),
        inputs=(registry.TEXTURE,),
        outputs=(registry.BUFFER,),
        note="a reduction kernel that reads texels",
    ))
    assert "relax.sum" in registry.recorded_attrs()
    out = run_pass(texscope.texture_scope_pipeline(ADRENO), rules.Reductions)
    found = scopes(out)
    # The user's sum reads the conv output as a texture; mean still needs a buffer: one copy.
    assert found["c"] == "global.texture-weight"
    assert [n for n in found if n.endswith("_global")] == ["c_global"]


@pytest.mark.parametrize("name", ["Depthwise", "PackedThenDepthwise"])
def test_depthwise_convs_are_packed_too(name):
    mod = run_pass(texscope.ConvertToPackedLayout(ADRENO), getattr(rules, name))
    convs = [b.value for b in mod["main"].body.blocks[0].bindings
             if isinstance(b.value, relax.Call) and b.value.op.name == "relax.nn.conv2d"]
    # texscope's packed legalization handles groups (TVM's divides by zero).
    layouts = {int(c.attrs.groups): c.attrs.data_layout for c in convs}
    assert layouts == {8: "NCHW4c", 1: "NCHW4c"}


def _conv_layouts(mod):
    return [(str(b.value.attrs.data_layout), registry.support_for(b.value, mod).name)
            for b in mod["main"].body.blocks[0].bindings
            if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)
            and b.value.op.name == "relax.nn.conv2d"]


def test_channel_padding_is_the_registrys_data(monkeypatch):
    # RGBStem's conv reads 3 channels: padded to 4 (the registry says how),
    # it packs and is the packed conv entry's.
    assert _conv_layouts(texscope.ConvertToPackedLayout(ADRENO)(texel_cases.RGBStem)) == [
        ("NCHW4c", "conv2d_nchw4c")]
    assert registry.channel_paddings() == {
        "relax.nn.conv2d": registry.ChannelPadding(("data_layout", "kernel_layout", "out_layout"))}
    # Without the entry's padding data stage 1 pads nothing: the conv stays
    # NCHW and reads buffers (pad_channels names no operator of its own).
    monkeypatch.setattr(registry, "BUILTIN", tuple(
        attrs.evolve(e, channel_padding=None) for e in registry.BUILTIN))
    assert _conv_layouts(texscope.ConvertToPackedLayout(ADRENO)(texel_cases.RGBStem)) == [
        ("NCHW", "conv2d_unpacked")]


def test_the_packed_conv_legalization_is_named_by_the_registry(monkeypatch):
    assert registry.packed_legalizations() == {"relax.nn.conv2d": "conv2d_nchwc"}
    assert legalize.packed_legalizations() == {"relax.nn.conv2d": legalize.conv2d_nchwc}
    # A kept operator without a texscope legalization is left to TVM's.
    monkeypatch.setattr(registry, "BUILTIN", tuple(
        attrs.evolve(e, legalization="") for e in registry.BUILTIN))
    assert legalize.packed_legalizations() == {}


def test_upstreams_legalized_layout_transforms_are_recognised_by_what_they_do():
    with ADRENO:
        theirs = upstream.stage1()(rules.Conflict)
    names = entry_names(theirs)
    # Upstream records nothing: its transforms are found as kernels made of
    # one store of a loaded element, its reductions stay opaque.
    assert {names[n] for n in ("lv", "lv1", "lv2")} == {"layout_transform_legalized"}
    assert names["m"] == names["s"] == "opaque"


def test_sync_rules_are_inferred_as_executorch_does():
    def rules_of(inputs, outputs):
        return texscope.OpSupport(name="x", key=registry.PatternKey(0), inputs=inputs,
                                  outputs=outputs).sync_rules()

    any_, tex, buf = registry.ANY, registry.TEXTURE, registry.BUFFER
    assert rules_of((any_,), (any_,)) == {"inputs", "outputs", "primary"}
    assert rules_of((any_, buf), (tex,)) == {"outputs"}
    assert rules_of((tex,), (tex, buf)) == {"inputs", "primary"}
    assert rules_of((tex, buf), (buf, buf)) == frozenset()


@pytest.mark.usefixtures("user_entries")
def test_a_later_user_entry_wins_over_an_earlier_one():
    mod = run_pass(texscope.ConvertToPackedLayout(ADRENO), rules.ConvRelu)
    for name in ("first", "second", "third"):
        texscope.register_op(texscope.OpSupport(
            name=name, key=registry.PatternKey(registry.PATTERN_INJECTIVE),
            inputs=(registry.ANY,), outputs=(registry.ANY,)))
    assert [e.name for e in registry.entries()[:3]] == ["third", "second", "first"]
    assert entry_names(mod)["lv2"] == "third"


def test_a_direct_call_of_a_relax_function_is_opaque():
    # No entry is needed for calls between Relax functions: the pipeline
    # inlines private callees and refuses public ones before stage 2, and a
    # direct call matches no operator and no call_tir pattern, so stage 2 run
    # by hand sees buffers in and out.
    names = entry_names(rules.PublicCallee)
    assert names["b"] == "opaque"
    plan = collect_producer(collect_consumer(rules.PublicCallee, "main",
                                             texscope.texture_target(ADRENO)))
    assert plan.of("x").scope == plan.of("b").scope == "global"


def test_fan_in_sums_the_axes_each_weight_layout_reduces():
    # conv2d OIHW (8, 3, 5, 5): 3 input channels times a 5x5 window per output.
    assert registry.fan_in("relax.nn.conv2d", [8, 3, 5, 5]) == 75
    # conv2d_transpose IOHW (3, 8, 5, 5): the first axis is the input channels.
    assert registry.fan_in("relax.nn.conv2d_transpose", [3, 8, 5, 5]) == 75
    # matmul's weight (K, N): K products per output.
    assert registry.fan_in("relax.matmul", [64, 10]) == 64
    assert registry.OPERAND_ROLES[("relax.nn.batch_norm", 4)] == "variance"


def test_a_legalized_layout_transform_padding_channels_moves_elements_only():
    """A pad value under a test of indices, not of the data (a relu)."""
    @T.prim_func(private=True, s_tir=True)
    def pad_and_pack(x: T.Buffer((1, 3, 4, 4), "float32"), y: T.Buffer((1, 1, 4, 4, 4), "float32")):
        for n, c, h, w, lane in T.grid(1, 1, 4, 4, 4):
            with T.sblock("te_layout_transform"):
                vn, vc, vh, vw, vl = T.axis.remap("SSSSS", [n, c, h, w, lane])
                y[vn, vc, vh, vw, vl] = T.if_then_else(vc * 4 + vl < 3, x[vn, vc * 4 + vl, vh, vw],
                                                       T.float32(0))

    @T.prim_func(private=True, s_tir=True)
    def relu(x: T.Buffer((1, 3, 4, 4), "float32"), y: T.Buffer((1, 3, 4, 4), "float32")):
        for n, c, h, w in T.grid(1, 3, 4, 4):
            with T.sblock("relu"):
                vn, vc, vh, vw = T.axis.remap("SSSS", [n, c, h, w])
                y[vn, vc, vh, vw] = T.if_then_else(x[vn, vc, vh, vw] > T.float32(0),
                                                   x[vn, vc, vh, vw], T.float32(0))

    assert registry.moves_elements_only(pad_and_pack)
    assert not registry.moves_elements_only(relu)
